#include "runtime/kernel.h"

#include <stdexcept>

#include "runtime/device_memory.h"

namespace segtile {

AotKernel::AotKernel(std::vector<KernelArg> signature, ArgvFn argv, MetadataFn metadata, MemoryLedger *ledger)
    : sig_(std::move(signature)), argv_(argv), md_(metadata()) {
    ctx_.ledger = ledger;
    KernelContext::install_halide_hooks();
    std::map<std::string, int> pos;
    for (int i = 0; i < md_->num_arguments; i++) pos[md_->arguments[i].name] = i;
    if (pos.count("__user_context")) user_context_slot_ = pos["__user_context"];
    for (const auto &a : sig_) {
        auto it = pos.find(a.name);
        if (it == pos.end() || (!a.scalar && md_->arguments[it->second].dimensions != a.dims))
            throw std::runtime_error("kernel library '" + std::string(md_->name) + "' has no argument '" + a.name +
                                     "' of the expected shape; it was built from another model or plan: rebuild it");
        slot_.push_back(it->second);
    }
    if ((int)sig_.size() + (user_context_slot_ >= 0) != md_->num_arguments)
        throw std::runtime_error("kernel library '" + std::string(md_->name) + "' has extra arguments; rebuild it");
}

void AotKernel::call(const std::vector<void *> &args) {
    std::vector<void *> slots(md_->num_arguments, nullptr);
    void *uc = &ctx_;
    if (user_context_slot_ >= 0) slots[user_context_slot_] = &uc;
    for (size_t i = 0; i < sig_.size(); i++) slots[slot_[i]] = args[i];
    ctx_.last_error.clear();
    if (int err = argv_(slots.data()))
        throw std::runtime_error(std::string(md_->name) + " failed (" + std::to_string(err) + "): " + ctx_.last_error);
}

bool AotKernel::set_device_stream(DeviceStream *stream) {
    if (stream && (user_context_slot_ < 0 || !device_streams_available())) return false;
    ctx_.stream = stream;
    return true;
}

std::vector<void *> ArgList::build(const std::vector<KernelArg> &sig) {
    std::vector<void *> out;
    for (const auto &a : sig) {
        if (a.scalar) {
            auto it = scalars_.find(a.name);
            if (it == scalars_.end()) throw std::logic_error("kernel scalar '" + a.name + "' not bound");
            out.push_back(&it->second);
        } else {
            auto it = ptrs_.find(a.name);
            if (it == ptrs_.end()) throw std::logic_error("kernel buffer '" + a.name + "' not bound");
            out.push_back(it->second);
        }
    }
    return out;
}

}  // namespace segtile
