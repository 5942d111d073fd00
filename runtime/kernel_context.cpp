#include "runtime/kernel_context.h"

#include "HalideRuntime.h"
#include "runtime/device_memory.h"

namespace segtile {

namespace {

void *ledger_malloc(void *user_context, size_t bytes) {
    auto *ctx = static_cast<KernelContext *>(user_context);
    return MemoryLedger::halide_malloc(ctx ? ctx->ledger : nullptr, bytes);
}

void ledger_free(void *user_context, void *ptr) {
    auto *ctx = static_cast<KernelContext *>(user_context);
    MemoryLedger::halide_free(ctx ? ctx->ledger : nullptr, ptr);
}

void record_error(void *user_context, const char *msg) {
    if (auto *ctx = static_cast<KernelContext *>(user_context)) ctx->last_error += msg;
}

}  // namespace

void KernelContext::install_halide_hooks() {
    halide_set_custom_malloc(&ledger_malloc);
    halide_set_custom_free(&ledger_free);
    halide_set_error_handler(&record_error);
    install_device_memory_hooks();
}

void KernelContext::install_halide_hooks(const HalideHookSetters &runtime) {
    runtime.set_malloc(&ledger_malloc);
    runtime.set_free(&ledger_free);
    runtime.set_error(&record_error);
}

}  // namespace segtile
