#include "runtime/tensor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <stdexcept>

namespace segtile {

namespace {
int64_t product(const std::vector<int64_t> &d) {
    int64_t n = 1;
    for (int64_t x : d) n *= x;
    return n;
}
}  // namespace

Tensor::Tensor(std::vector<int64_t> dims, MemoryLedger *ledger, MemoryLedger::Kind kind, halide_type_t type, bool zero)
    : dims_(std::move(dims)), numel_(product(dims_)), type_(type), ledger_(ledger), kind_(kind) {
    if (ledger && kind == MemoryLedger::Kind::Working) {
        // From the ledger's block cache (it counts the bytes): tile windows
        // come and go once per tile, and fresh pages fault in one by one.
        void *p = MemoryLedger::working_malloc(ledger, (size_t)bytes());
        if (!p) throw std::bad_alloc();
        if (zero) std::memset(p, 0, (size_t)bytes());
        data_ = p;
        free_ = [ledger, p] { MemoryLedger::working_free(ledger, p); };
        return;
    }
    auto *p = new uint64_t[(bytes() + 7) / 8]();  // zeroed, 8-byte aligned
    data_ = p;
    const size_t n = (size_t)bytes();
    free_ = [p, ledger, kind, n] {
        if (ledger) ledger->freed(n, kind);
        delete[] p;
    };
    if (ledger_) ledger_->allocated(bytes(), kind_);
}

Tensor Tensor::mapped(std::vector<int64_t> dims, const std::string &dir, MemoryLedger *ledger, halide_type_t type) {
    Tensor t;
    t.dims_ = std::move(dims);
    t.numel_ = product(t.dims_);
    t.type_ = type;
    std::string path = dir + "/segtile-checkpoint-XXXXXX";
    int fd = mkstemp(path.data());
    if (fd < 0)
        throw std::runtime_error("cannot create a checkpoint file in '" + dir + "': " + std::strerror(errno) +
                                 "; choose a writable directory with room for the checkpoints");
    const size_t len = t.mapped_length();
    if (ftruncate(fd, (off_t)len) != 0) {
        close(fd);
        unlink(path.c_str());
        throw std::runtime_error("cannot size checkpoint file '" + path + "' to " + format_bytes((int64_t)len) +
                                 ": " + std::strerror(errno));
    }
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    // Unlinked at once: the mapping keeps the file, and a run that is killed
    // leaves no checkpoint files (tens of GiB at scale) behind.
    unlink(path.c_str());
    if (p == MAP_FAILED) throw std::runtime_error("cannot map checkpoint file '" + path + "': " + std::strerror(errno));
    t.data_ = p;
    const size_t n = (size_t)t.bytes();
    t.free_ = [p, len, ledger, n] {
        if (ledger) ledger->freed(n, MemoryLedger::Kind::Checkpoint);
        munmap(p, len);
    };
    t.mapped_ = true;
    t.ledger_ = ledger;
    t.kind_ = MemoryLedger::Kind::Checkpoint;
    if (ledger) ledger->allocated(t.bytes(), t.kind_);
    return t;
}

Tensor::~Tensor() { release(); }

void Tensor::drop_resident() {
    // MADV_DONTNEED on a shared file mapping keeps dirty pages in the page
    // cache, bound for the file: nothing is lost.
    if (mapped_ && data_) madvise(data_, mapped_length(), MADV_DONTNEED);
}

void Tensor::populate_for_write(int64_t x0, int64_t x1, int64_t y0, int64_t y1, int64_t c0, int64_t c1) {
    if (!mapped_ || !data_ || x0 >= x1 || y0 >= y1) return;
    const int64_t width = dims_[0], height = dims_.size() > 1 ? dims_[1] : 1, elem = type_.bytes();
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), base = (uintptr_t)data_;
    for (int64_t c = c0; c < c1; c++) {
        // The span from the window's first element to its last, in whole pages:
        // a row of a plane narrower than a page shares its pages with its
        // neighbours, which the kernel writes too.
        const uintptr_t lo = base + (uintptr_t)(((c * height + y0) * width + x0) * elem);
        const uintptr_t hi = base + (uintptr_t)(((c * height + y1 - 1) * width + x1) * elem);
        const uintptr_t start = lo & ~(page - 1);
        if (madvise((void *)start, hi - start, MADV_POPULATE_WRITE) != 0) return;  // EINVAL before Linux 5.14
    }
}

void Tensor::populate_for_write() {
    if (mapped_ && data_) madvise(data_, mapped_length(), MADV_POPULATE_WRITE);  // advice, as above
}

void Tensor::release() {
    if (data_) {
        free_();
    }
    data_ = nullptr;
    free_ = nullptr;
}

Tensor::Tensor(Tensor &&o) noexcept { *this = std::move(o); }

Tensor &Tensor::operator=(Tensor &&o) noexcept {
    if (this != &o) {
        release();
        dims_ = std::move(o.dims_);
        numel_ = o.numel_;
        type_ = o.type_;
        data_ = o.data_;
        free_ = std::move(o.free_);
        ledger_ = o.ledger_;
        kind_ = o.kind_;
        mapped_ = o.mapped_;
        o.data_ = nullptr;
        o.mapped_ = false;
        o.numel_ = 0;
    }
    return *this;
}

void Tensor::check_type(halide_type_t t) const {
    if (!(t == type_)) throw std::logic_error("tensor element type mismatch");
}

void Tensor::fill(double v) {
    if (type_ == halide_type_of<double>()) std::fill(as<double>(), as<double>() + numel_, v);
    else std::fill(as<float>(), as<float>() + numel_, (float)v);
}

void Tensor::zero() {
    // A mapped tensor punches a hole in its file (reads back as zeros)
    // rather than writing zeros through memory: at scale that is tens of
    // GiB written and made resident. File systems without holes: memset.
    if (mapped_ && data_ && madvise(data_, mapped_length(), MADV_REMOVE) == 0) return;
    std::memset(data_, 0, bytes());
    drop_resident();
}

Halide::Runtime::Buffer<> Tensor::view() const {
    std::vector<int> d(dims_.begin(), dims_.end());
    return Halide::Runtime::Buffer<>(type_, data_, d);
}

std::string shape_string(const std::vector<int64_t> &dims) {
    std::string s = "(";
    for (size_t i = 0; i < dims.size(); i++) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + ")";
}

}  // namespace segtile
