#include "runtime/host_copies.h"

#include <algorithm>

#include "runtime/host_threads.h"

namespace segtile {

using Buffer = Halide::Runtime::Buffer<>;

// dst(x0 + x, y0 + y, c, 0) += src(x, y, c, 0) for channels c0..c1-1:
// overlapping input-gradient windows add.
template <typename T>
void add_window(Tensor &dst, Tensor &src, int64_t x0, int64_t y0, int64_t c0, int64_t c1) {
    const auto &d = dst.dims();
    const auto &s = src.dims();
    T *out = dst.as<T>();
    const T *in = src.as<T>();
    for (int64_t c = c0; c < c1; c++)
        for (int64_t y = 0; y < s[1]; y++) {
            T *row = out + (c * d[1] + y0 + y) * d[0] + x0;
            const T *srow = in + (c * s[1] + y) * s[0];
            for (int64_t x = 0; x < s[0]; x++) row[x] += srow[x];
        }
}

template <typename T>
void add_scaled(Tensor &dst, Tensor &src, double scale, int64_t k0, int64_t k1) {
    T *out = dst.as<T>();
    const T *in = src.as<T>();
    for (int64_t k = k0; k < k1; k++) out[k] += (T)scale * in[k];
}

template <typename T>
void scale(Tensor &t, double f) {
    T *p = t.as<T>();
    for (int64_t k = 0; k < t.numel(); k++) p[k] *= (T)f;
}

void scale(Tensor &t, double f) {
    if (t.type() == halide_type_of<double>()) scale<double>(t, f);
    else scale<float>(t, f);
}

// The host's copies and adds, one channel plane (or one chunk) per task
// where `threads` is given (the device path), else in this thread.
void add_window(Tensor &dst, Tensor &src, int64_t x0, int64_t y0, HostThreads *threads) {
    const bool dbl = dst.type() == halide_type_of<double>();
    auto planes = [&](int64_t c0, int64_t c1) {
        dst.populate_for_write(x0, x0 + src.dims()[0], y0, y0 + src.dims()[1], c0, c1);
        if (dbl) add_window<double>(dst, src, x0, y0, c0, c1);
        else add_window<float>(dst, src, x0, y0, c0, c1);
    };
    if (!threads) return planes(0, src.dims()[2]);
    threads->parallel_for(src.dims()[2], [&](int64_t c) { planes(c, c + 1); });
}

// sum += src with Kahan's compensation in `carry` (as wide as sum): a
// segment's weight gradient adds one partial per tile, and in float32 the
// plain sum drifted by n * eps / 2 (860 one-pixel tiles: a bias gradient
// 1.1e-5 off the untiled one; with carry the error stays at eps).
template <typename T>
void add_compensated(Tensor &sum, Tensor &carry, Tensor &src, int64_t k0, int64_t k1) {
    T *s = sum.as<T>(), *c = carry.as<T>();
    const T *in = src.as<T>();
    for (int64_t k = k0; k < k1; k++) {
        const T y = in[k] - c[k];
        const T t = s[k] + y;
        c[k] = (t - s[k]) - y;
        s[k] = t;
    }
}

// range(k0, k1) over [0, n): in chunks of 2^18 elements, one per task
// where `threads` is given and there is more than one.
template <typename F>
void in_chunks(int64_t n, HostThreads *threads, const F &range) {
    constexpr int64_t chunk = 1 << 18;
    if (!threads || n <= chunk) return range(0, n);
    threads->parallel_for((n + chunk - 1) / chunk, [&](int64_t i) { range(i * chunk, std::min(n, (i + 1) * chunk)); });
}

void add_compensated(Tensor &sum, Tensor &carry, Tensor &src, HostThreads *threads) {
    const bool dbl = sum.type() == halide_type_of<double>();
    auto range = [&](int64_t k0, int64_t k1) {
        if (dbl) add_compensated<double>(sum, carry, src, k0, k1);
        else add_compensated<float>(sum, carry, src, k0, k1);
    };
    in_chunks(sum.numel(), threads, range);
}

void add_scaled(Tensor &dst, Tensor &src, double scale, HostThreads *threads) {
    const bool dbl = dst.type() == halide_type_of<double>();
    auto range = [&](int64_t k0, int64_t k1) {
        if (dbl) add_scaled<double>(dst, src, scale, k0, k1);
        else add_scaled<float>(dst, src, scale, k0, k1);
    };
    in_chunks(dst.numel(), threads, range);
}

// dst = src over the same region (x, y, channels, batch of one), one
// channel plane per task where `threads` is given.
void copy_window(Buffer &dst, const Buffer &src, HostThreads *threads) {
    if (!threads || dst.dimensions() < 3) return dst.copy_from(src);
    const int c0 = dst.dim(2).min();
    threads->parallel_for(dst.dim(2).extent(), [&](int64_t c) {
        Buffer d = dst.sliced(2, c0 + (int)c);
        d.copy_from(src.sliced(2, c0 + (int)c));
    });
}

// Image n of a batch as a (W, H, C, 1) buffer with n at 0, as kernels expect.
Buffer batch_item(const Buffer &b, int n) {
    Buffer v = b.sliced(b.dimensions() - 1, n);
    return v.embedded(b.dimensions() - 1, 0);
}

}  // namespace segtile
