// Tensor: an owning array with Halide dims (innermost first) and an element
// type (float32 by default; float64 for exactness tests), its bytes counted
// in a MemoryLedger, viewable as a halide_buffer_t for kernels. Checkpoints
// larger than memory live in a memory-mapped file (Tensor::mapped).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "HalideBuffer.h"
#include "runtime/memory_ledger.h"

namespace segtile {

class Tensor {
public:
    Tensor() = default;
    // Zeroed, but for working tensors with `zero` false: a kernel output
    // written whole before it is read (a tile's gradient window).
    Tensor(std::vector<int64_t> dims, MemoryLedger *ledger, MemoryLedger::Kind kind = MemoryLedger::Kind::Working,
           halide_type_t type = halide_type_of<float>(), bool zero = true);
    // Backed by a new file in `dir` (removed when the tensor dies); zeroed.
    static Tensor mapped(std::vector<int64_t> dims, const std::string &dir, MemoryLedger *ledger,
                         halide_type_t type = halide_type_of<float>());
    ~Tensor();
    Tensor(Tensor &&o) noexcept;
    Tensor &operator=(Tensor &&o) noexcept;
    Tensor(const Tensor &) = delete;
    Tensor &operator=(const Tensor &) = delete;

    const std::vector<int64_t> &dims() const { return dims_; }
    halide_type_t type() const { return type_; }
    int64_t numel() const { return numel_; }
    int64_t bytes() const { return numel_ * type_.bytes(); }
    bool defined() const { return data_ != nullptr; }
    void *raw() const { return data_; }
    float *data() { return as<float>(); }
    const float *data() const { return const_cast<Tensor *>(this)->as<float>(); }
    template <typename T>
    T *as() {
        check_type(halide_type_of<T>());
        return static_cast<T *>(data_);
    }
    void fill(double v);
    void zero();
    // A mapped tensor drops its pages from this process (the file keeps
    // the data; the next access reads it back): resident pages of mapped
    // checkpoints would otherwise count in the process's memory (VmRSS,
    // VmHWM) up to the whole store. No-op for a tensor in memory.
    void drop_resident();
    // A mapped tensor maps the pages of planes [c0, c1), rows [y0, y1),
    // columns [x0, x1) writable before they are written: one system call per
    // plane (MADV_POPULATE_WRITE) rather than a page fault per 4 KiB page,
    // half the time of faulting them in one by one. No-op in memory, and
    // advice only: a kernel without it faults the pages in as before.
    void populate_for_write(int64_t x0, int64_t x1, int64_t y0, int64_t y1, int64_t c0, int64_t c1);
    void populate_for_write();  // the whole tensor: one call

    // A non-owning view for Halide kernels (dense, min 0 in every dim).
    Halide::Runtime::Buffer<> view() const;

private:
    void check_type(halide_type_t t) const;
    void release();
    size_t mapped_length() const { return (size_t)std::max<int64_t>(bytes(), 1); }  // mmap needs >= 1 byte
    std::vector<int64_t> dims_;
    int64_t numel_ = 0;
    halide_type_t type_ = halide_type_of<float>();
    void *data_ = nullptr;
    std::function<void()> free_;  // releases data_ and uncounts it in the ledger
    MemoryLedger *ledger_ = nullptr;
    MemoryLedger::Kind kind_ = MemoryLedger::Kind::Working;
    bool mapped_ = false;
};

std::string shape_string(const std::vector<int64_t> &dims);

}  // namespace segtile
