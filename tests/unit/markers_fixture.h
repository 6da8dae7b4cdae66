/* The DeepSeek chat markers the tool-call tests write by hand (tokenizer.md §7,
 * deepseek4.md §5): U+FF5C is the fullwidth bar, U+2581 the lower block. */
#ifndef MARKERS_FIXTURE_H
#define MARKERS_FIXTURE_H

#define BAR "\xef\xbd\x9c"
#define SPC "\xe2\x96\x81"
#define CB "<" BAR "tool" SPC "calls" SPC "begin" BAR ">"
#define CE "<" BAR "tool" SPC "calls" SPC "end" BAR ">"
#define KB "<" BAR "tool" SPC "call" SPC "begin" BAR ">"
#define KE "<" BAR "tool" SPC "call" SPC "end" BAR ">"
#define SEP "<" BAR "tool" SPC "sep" BAR ">"
#define D "<" BAR "DSML" BAR
#define DE "</" BAR "DSML" BAR

#endif
