/* Whether the machine has an NVIDIA GPU, without CUDA (og_device_cuda.h). */
#include "og_device_cuda.h"

#include <unistd.h>

bool og_cuda_machine_has_gpu(void) {
    return access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}
