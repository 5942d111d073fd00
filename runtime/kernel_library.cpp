#include "runtime/kernel_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <stdexcept>

namespace segtile {

namespace {

std::string dl_error() {
    const char *e = dlerror();
    return e ? e : "unknown dlopen error";
}

template <typename Fn>
Fn symbol(void *handle, const std::string &name, const std::string &path) {
    dlerror();
    void *p = dlsym(handle, name.c_str());
    if (!p) throw std::runtime_error("kernel library " + path + " has no symbol " + name + ": " + dl_error());
    return reinterpret_cast<Fn>(p);
}

// A kernel library's entry point, called through its _argv function. Its
// arguments are the signature's in order (the outputs are named for their
// Funcs, not for the signature), after the user context; the constructor
// checks their kinds and dimensions against the library's metadata.
class LibraryKernel : public Kernel {
public:
    LibraryKernel(const std::string &path, std::vector<KernelArg> signature, AotKernel::ArgvFn argv,
                  const halide_filter_metadata_t *md, MemoryLedger *ledger)
        : sig_(std::move(signature)), argv_(argv), md_(md) {
        ctx_.ledger = ledger;
        if (md_->num_arguments != (int)sig_.size() + 1 || std::string(md_->arguments[0].name) != "__user_context")
            throw std::runtime_error("kernel library " + path + " has " + std::to_string(md_->num_arguments) +
                                     " arguments, not a user context and " + std::to_string(sig_.size()));
        for (size_t i = 0; i < sig_.size(); i++) {
            const halide_filter_argument_t &a = md_->arguments[i + 1];
            const KernelArg &want = sig_[i];
            const bool scalar = a.kind == halide_argument_kind_input_scalar;
            const bool output = a.kind == halide_argument_kind_output_buffer;
            if (scalar != want.scalar || output != want.output || (!scalar && a.dimensions != want.dims))
                throw std::runtime_error("kernel library " + path + ": argument " + std::to_string(i + 1) + " (" +
                                         a.name + ") is not the signature's '" + want.name + "'");
        }
    }
    // No dlclose: the runtime's worker threads outlive any one kernel, and
    // a library stays mapped (once) until the process exits.
    const std::vector<KernelArg> &signature() const override { return sig_; }
    void call(const std::vector<void *> &args) override {
        std::vector<void *> slots(args.size() + 1);
        void *uc = &ctx_;
        slots[0] = &uc;
        std::copy(args.begin(), args.end(), slots.begin() + 1);
        ctx_.last_error.clear();
        if (int err = argv_(slots.data()))
            throw std::runtime_error(std::string(md_->name) + " failed (" + std::to_string(err) + "): " + ctx_.last_error);
    }

private:
    std::vector<KernelArg> sig_;
    AotKernel::ArgvFn argv_;
    const halide_filter_metadata_t *md_;
    KernelContext ctx_;
};

}  // namespace

std::unique_ptr<Kernel> load_library_kernel(const std::string &path, const std::string &function,
                                            std::vector<KernelArg> signature, MemoryLedger *ledger) {
    // RTLD_NOW: a library that does not link fails here, not mid-step.
    // RTLD_LOCAL: every library has the same runtime symbols' names.
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw std::runtime_error("cannot load kernel library " + path + ": " + dl_error());
    try {
        // dlsym on the handle searches the library's dependencies: these are
        // the setters of the runtime this kernel calls (one per process,
        // however many libraries share it; installing again is harmless).
        KernelContext::install_halide_hooks(
            {symbol<HalideHookSetters::MallocSetter>(handle, "halide_set_custom_malloc", path),
             symbol<HalideHookSetters::FreeSetter>(handle, "halide_set_custom_free", path),
             symbol<HalideHookSetters::ErrorSetter>(handle, "halide_set_error_handler", path)});
        const auto md = symbol<AotKernel::MetadataFn>(handle, function + "_metadata", path)();
        return std::make_unique<LibraryKernel>(path, std::move(signature),
                                               symbol<AotKernel::ArgvFn>(handle, function + "_argv", path), md, ledger);
    } catch (...) {
        dlclose(handle);
        throw;
    }
}

}  // namespace segtile
