// Whether this process can use a CUDA device through the Halide runtime that
// the CUDA kernel libraries link (segtile_halide_runtime_cuda): a one-float
// device allocation succeeds. Without a driver or a GPU it fails with an
// error code (the runtime loads libcuda at first use); segtile's error hook
// (what every AotKernel installs) keeps Halide's default handler, which
// aborts, out of it.
#pragma once

#include "HalideBuffer.h"
#include "HalideRuntimeCuda.h"
#include "runtime/kernel_context.h"

namespace segtile::testing {

inline bool cuda_device_present() {
    KernelContext::install_halide_hooks();
    Halide::Runtime::Buffer<float> probe(1);
    if (probe.device_malloc(halide_cuda_device_interface()) != 0) return false;
    probe.device_free();
    return true;
}

}  // namespace segtile::testing
