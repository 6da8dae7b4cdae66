/* OG_TEST_SANITIZED: defined when this test is built with AddressSanitizer or
 * ThreadSanitizer (gcc's __SANITIZE_*__ macros or clang's __has_feature). The
 * sanitizer builds (several times slower) run smaller cases of the long tests;
 * the plain build runs them whole. */
#ifndef OG_SANITIZED_FIXTURE_H
#define OG_SANITIZED_FIXTURE_H

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OG_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define OG_TEST_SANITIZED 1
#endif
#endif

#endif
