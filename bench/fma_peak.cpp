// 16 independent accumulator chains per thread: an FMA has a latency of 4
// cycles and a core issues two per cycle, so at least 8 chains in flight
// are needed to saturate the units (fewer chains or a rolled loop measure
// about half). The chain loop below is unrolled by the compiler into 16
// consecutive register-to-register FMAs with no loads; checked with
//   objdump -d --no-show-raw-insn fma_peak.cpp.o
// which shows, per function, 16 back-to-back
//   vfmadd213ps %zmm.., %zmm.., %zmm..   (avx512, float32; vfmadd213pd for float64)
//   vfmadd213ps %ymm.., %ymm.., %ymm..   (avx2)
// in the loop body followed by the counter decrement and branch.
#include "bench/fma_peak.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace segtile::bench {

namespace {

constexpr int kChains = 16;

// Each chain computes acc = acc * a + b, which converges (a < 1) and never
// becomes denormal, so timing does not depend on the values.
__attribute__((target("avx512f"))) double chains_avx512_f32(int64_t iters) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; k++) acc[k] = _mm512_set1_ps(0.5f + 0.01f * k);
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < kChains; k++) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
    __m512 s = acc[0];
    for (int k = 1; k < kChains; k++) s = _mm512_add_ps(s, acc[k]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f"))) double chains_avx512_f64(int64_t iters) {
    __m512d acc[kChains];
    for (int k = 0; k < kChains; k++) acc[k] = _mm512_set1_pd(0.5 + 0.01 * k);
    const __m512d a = _mm512_set1_pd(0.999), b = _mm512_set1_pd(0.001);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < kChains; k++) acc[k] = _mm512_fmadd_pd(acc[k], a, b);
    __m512d s = acc[0];
    for (int k = 1; k < kChains; k++) s = _mm512_add_pd(s, acc[k]);
    return _mm512_reduce_add_pd(s);
}

__attribute__((target("avx2,fma"))) double chains_avx2_f32(int64_t iters) {
    __m256 acc[kChains];
    for (int k = 0; k < kChains; k++) acc[k] = _mm256_set1_ps(0.5f + 0.01f * k);
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < kChains; k++) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
    alignas(32) float out[8];
    __m256 s = acc[0];
    for (int k = 1; k < kChains; k++) s = _mm256_add_ps(s, acc[k]);
    _mm256_store_ps(out, s);
    double r = 0;
    for (float v : out) r += v;
    return r;
}

__attribute__((target("avx2,fma"))) double chains_avx2_f64(int64_t iters) {
    __m256d acc[kChains];
    for (int k = 0; k < kChains; k++) acc[k] = _mm256_set1_pd(0.5 + 0.01 * k);
    const __m256d a = _mm256_set1_pd(0.999), b = _mm256_set1_pd(0.001);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < kChains; k++) acc[k] = _mm256_fmadd_pd(acc[k], a, b);
    alignas(32) double out[4];
    __m256d s = acc[0];
    for (int k = 1; k < kChains; k++) s = _mm256_add_pd(s, acc[k]);
    _mm256_store_pd(out, s);
    return out[0] + out[1] + out[2] + out[3];
}

using ChainFn = double (*)(int64_t);

struct Kernel {
    ChainFn fn;
    double flops_per_iter;  // chains x lanes x 2
};

Kernel pick(Precision p, bool avx512) {
    const double lanes = (avx512 ? 64.0 : 32.0) / (p == Precision::Float32 ? 4 : 8);
    ChainFn fn = avx512 ? (p == Precision::Float32 ? chains_avx512_f32 : chains_avx512_f64)
                        : (p == Precision::Float32 ? chains_avx2_f32 : chains_avx2_f64);
    return {fn, kChains * lanes * 2};
}

std::vector<int> allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> cpus;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) cpus.push_back(c);
    if (cpus.empty()) cpus.push_back(0);
    return cpus;
}

}  // namespace

std::string fma_isa() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "avx512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
    return "none";
}

int usable_cpus() { return (int)allowed_cpus().size(); }

PeakResult measure_fma_peak(Precision p, int threads, double seconds) {
    PeakResult r;
    r.isa = fma_isa();
    r.threads = threads;
    if (r.isa == "none") return r;
    const Kernel k = pick(p, r.isa == "avx512");
    // Calibrate the iteration count on one thread, then run all threads at once.
    int64_t iters = 1 << 16;
    for (;;) {
        const auto t0 = std::chrono::steady_clock::now();
        volatile double sink = k.fn(iters);
        (void)sink;
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (dt > 0.05 || iters > (int64_t)1 << 40) {
            iters = (int64_t)(iters * seconds / dt) + 1;
            break;
        }
        iters *= 4;
    }
    const std::vector<int> cpus = allowed_cpus();
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    std::vector<double> sinks(threads);
    for (int t = 0; t < threads; t++)
        pool.emplace_back([&, t] {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpus[t % cpus.size()], &one);
            pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
            ready++;
            while (!go.load()) std::this_thread::yield();
            sinks[t] = k.fn(iters);
        });
    while (ready.load() < threads) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    go = true;
    for (auto &th : pool) th.join();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.gflops = k.flops_per_iter * (double)iters * threads / r.seconds * 1e-9;
    return r;
}

}  // namespace segtile::bench
