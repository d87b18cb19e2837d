/* What every launcher shares at run time: the message of a failed launch
 * check (KVK_CHECK_LAUNCH in kernel_common.cuh).
 *
 * cudaGetLastError() after a launch returns the launch's own error (a
 * configuration the GPU refuses), but also a fault that an earlier kernel
 * or copy hit while it ran, once the runtime has noticed it. Such a fault
 * leaves the context unusable: every later call returns it ("sticky"). A
 * check that blamed the kernel just launched would send the reader to the
 * wrong kernel; this one says where to look instead. */
#include "kernel_common.cuh"

extern "C" int kvk_error_is_device_fault(int code)
{
    switch ((cudaError_t)code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable: return 1;
    default: return 0;
    }
}

extern "C" int kvk_launch_error(Err *err, int code, const char *what, const char *file, int line)
{
    const char *text = cudaGetErrorString((cudaError_t)code);
    if (kvk_error_is_device_fault(code))
        return err_set(err,
                       "%s:%d: before launching %s: an earlier kernel or copy failed on the device (%s); this "
                       "launch is not the cause: run under compute-sanitizer to find which one",
                       file, line, what, text);
    return err_set(err, "%s:%d: launching %s: %s", file, line, what, text);
}
