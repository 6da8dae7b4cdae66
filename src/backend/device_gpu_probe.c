/* Whether the machine has an NVIDIA GPU, without CUDA (og_device_cuda.h). */
#include "og_device_cuda.h"

#include <stdlib.h>
#include <unistd.h>

bool og_cuda_machine_has_gpu(void) {
    /* $ONEGPU_NVIDIA_PROC: the driver's version file to look for instead (tests fake one) */
    const char *fake = getenv("ONEGPU_NVIDIA_PROC");
    if (fake && *fake) return access(fake, F_OK) == 0;
    return access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}
