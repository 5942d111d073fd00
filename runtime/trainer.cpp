#include "runtime/trainer.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

namespace segtile {

TrainReport train_synthetic(const Model &m, StepKernel &kernel, const TrainConfig &cfg, MemoryLedger &ledger,
                            std::ostream &log) {
    if (m.loss.kind != LossKind::SoftmaxCrossEntropy || m.output_channels() < 2 || m.input_channels != cfg.data.channels)
        throw std::invalid_argument("model '" + m.name + "' does not fit the built-in task (" +
                                    std::to_string(cfg.data.channels) +
                                    "-channel images, 2 classes, softmax cross-entropy); pass a classifier with "
                                    "input_channels " + std::to_string(cfg.data.channels) + " and >= 2 classes");
    const int W = cfg.data.width, H = cfg.data.height, C = cfg.data.channels, N = cfg.batch;
    if (W < cfg.data.mark_size || H < cfg.data.mark_size)
        throw std::invalid_argument("the built-in task draws " + std::to_string(cfg.data.mark_size) + "x" +
                                    std::to_string(cfg.data.mark_size) + " marks: use images of at least that size");
    const auto shapes = m.shapes(W, H);  // throws if the image is too small
    const TensorShape &ps = shapes[m.loss.input_id];

    ParamStore params(m, &ledger);
    params.init_pytorch_default(cfg.seed);
    Optimizer opt(cfg.optimizer, params, &ledger);
    // Sized and printed before the batch tensors are allocated.
    const int64_t image_bytes = (int64_t)W * H * C * N * 4;
    const int64_t pred_bytes = ps.width * ps.height * ps.channels * N * 4;
    // Only a step built with the image's gradient needs a tensor for it.
    const bool image_grad = kernel.image_gradient();
    log << "model " << m.name << ": " << params.specs().size() << " parameter tensors, parameters+grads "
        << format_bytes(params.bytes()) << ", optimizer state " << format_bytes(ledger.current() - params.bytes())
        << "\nbatch " << N << " x " << W << "x" << H << "x" << C << ": image " << format_bytes(image_bytes)
        << ", image gradient " << (image_grad ? format_bytes(image_bytes) : "none") << ", prediction "
        << format_bytes(pred_bytes) << "\n";
    const auto data = MemoryLedger::Kind::Data;
    Tensor image({W, H, C, N}, &ledger, data);  // (W, H, C, N)
    Tensor grad_image;                          // (W, H, C, N) where the step makes it
    if (image_grad) grad_image = Tensor({W, H, C, N}, &ledger, data);
    Tensor prediction({ps.width, ps.height, ps.channels, N}, &ledger, data);  // (1, 1, K, N) logits
    std::vector<int32_t> labels;
    Halide::Runtime::Buffer<int32_t> label_buf(N);  // (N)

    std::mt19937_64 rng(cfg.seed + 1);
    TrainReport rep;
    const auto t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < cfg.steps; step++) {
        cfg.data.fill(image, labels, rng);
        for (int n = 0; n < N; n++) label_buf(n) = labels[n];
        const float loss = kernel.run(image, label_buf.raw_buffer(), params, prediction, image_grad ? &grad_image : nullptr);
        int correct = 0;
        const int K = (int)ps.channels;
        for (int n = 0; n < N; n++) {
            const float *z = prediction.data() + (int64_t)n * K;
            int best = 0;
            for (int k = 1; k < K; k++)
                if (z[k] > z[best]) best = k;
            correct += best == labels[n];
        }
        opt.step(params);
        rep.losses.push_back(loss);
        rep.accuracy.push_back((float)correct / N);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        char line[160];
        std::snprintf(line, sizeof line, "step %4d/%d  loss %.4f  batch accuracy %5.1f%%  %.1f images/s\n", step + 1,
                      cfg.steps, loss, 100.0 * correct / N, (step + 1) * N / secs);
        log << line << std::flush;
    }
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rep.peak_working = ledger.peak();
    rep.high_water_mark = process_high_water_mark();
    return rep;
}

}  // namespace segtile
