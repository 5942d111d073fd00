// Kernel: one compiled pipeline (AOT library or JIT), called with one
// pointer per entry of its signature (spec/kernel_signature.h), in order:
// halide_buffer_t* for buffers, int32_t* for scalars. ArgList binds those
// pointers by argument name.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "HalideRuntime.h"
#include "runtime/kernel_context.h"
#include "spec/kernel_signature.h"

namespace segtile {

class Kernel {
public:
    virtual ~Kernel() = default;
    virtual const std::vector<KernelArg> &signature() const = 0;
    // Throws std::runtime_error with the kernel's own error text.
    virtual void call(const std::vector<void *> &args) = 0;
    // The CUDA stream later calls run on (null: Halide's default). False
    // where the kernel cannot take one (JIT kernels, which have their own
    // Halide runtime; a program without the CUDA runtime): its calls stay
    // on the default stream.
    virtual bool set_device_stream(DeviceStream *stream) { return stream == nullptr; }
};

// An AOT library built with the user_context feature, called through its
// _argv entry point; its arguments are matched to `signature` by name.
class AotKernel : public Kernel {
public:
    using ArgvFn = int (*)(void **);
    using MetadataFn = const halide_filter_metadata_t *(*)();
    AotKernel(std::vector<KernelArg> signature, ArgvFn argv, MetadataFn metadata, MemoryLedger *ledger);
    const std::vector<KernelArg> &signature() const override { return sig_; }
    void call(const std::vector<void *> &args) override;
    bool set_device_stream(DeviceStream *stream) override;

private:
    std::vector<KernelArg> sig_;
    ArgvFn argv_;
    const halide_filter_metadata_t *md_;
    std::vector<int> slot_;  // metadata position of each signature entry
    int user_context_slot_ = -1;
    KernelContext ctx_;
};

// Collects the pointers of one call by argument name.
class ArgList {
public:
    void buffer(const std::string &name, halide_buffer_t *b) { ptrs_[name] = b; }
    void scalar(const std::string &name, int32_t v) { scalars_[name] = v; }
    // Pointers in signature order; throws naming any argument left unbound.
    std::vector<void *> build(const std::vector<KernelArg> &sig);

private:
    std::map<std::string, halide_buffer_t *> ptrs_;
    std::map<std::string, int32_t> scalars_;
};

}  // namespace segtile
