#include "runtime/kernel_context.h"

#include <cstdlib>
#include <cstring>

#include "HalideRuntime.h"

namespace segtile {

namespace {

// Halide wants 128-byte alignment for vector loads; a header before the block
// records its size so free can debit the ledger.
constexpr size_t kAlign = 128;

void *ledger_malloc(void *user_context, size_t bytes) {
    void *base = std::aligned_alloc(kAlign, kAlign + ((bytes + kAlign - 1) / kAlign) * kAlign);
    if (!base) return nullptr;
    std::memcpy(base, &bytes, sizeof(bytes));
    auto *ctx = static_cast<KernelContext *>(user_context);
    if (ctx && ctx->ledger) ctx->ledger->halide_allocated(bytes);
    return static_cast<char *>(base) + kAlign;
}

void ledger_free(void *user_context, void *ptr) {
    if (!ptr) return;
    char *base = static_cast<char *>(ptr) - kAlign;
    size_t bytes;
    std::memcpy(&bytes, base, sizeof(bytes));
    auto *ctx = static_cast<KernelContext *>(user_context);
    if (ctx && ctx->ledger) ctx->ledger->halide_freed(bytes);
    std::free(base);
}

void record_error(void *user_context, const char *msg) {
    if (auto *ctx = static_cast<KernelContext *>(user_context)) ctx->last_error += msg;
}

}  // namespace

void KernelContext::install_halide_hooks() {
    halide_set_custom_malloc(&ledger_malloc);
    halide_set_custom_free(&ledger_free);
    halide_set_error_handler(&record_error);
}

}  // namespace segtile
