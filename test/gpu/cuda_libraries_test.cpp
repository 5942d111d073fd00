// Every shipped model's CUDA library (models/CMakeLists.txt) links into a
// program without libHalide and matches the kernel signatures the executor
// binds. No device is touched, so this runs everywhere; apart from
// cuda_tiled_test so that the GPU check's bundle stays small (the PTX of
// every model is 45 MB).
#include <gtest/gtest.h>

#include <string>

#include "darknet19_cuda.h"
#include "marks_cnn_cuda.h"
#include "resnet18_cuda.h"
#include "runtime/executor.h"
#include "tiny_cnn_cuda.h"
#include "tiny_cnn_cuda_backward_0.h"
#include "unet_cuda.h"
#include "vgg16_cuda.h"

using namespace segtile;

TEST(CudaLibraries, MatchTheModelsKernelSignatures) {
    // Every shipped model has a CUDA library. Constructing the kernels checks
    // each library's arguments against the signature the executor binds; no
    // device is touched.
    struct Library {
        const char *model;
        ModelKernels (*kernels)(const Model &, MemoryLedger *);
        const char *(*cuts)();
    };
    const Library libraries[] = {{"tiny_cnn", tiny_cnn_cuda_kernels, tiny_cnn_cuda_cuts},
                                 {"marks_cnn", marks_cnn_cuda_kernels, marks_cnn_cuda_cuts},
                                 {"vgg16", vgg16_cuda_kernels, vgg16_cuda_cuts},
                                 {"darknet19", darknet19_cuda_kernels, darknet19_cuda_cuts},
                                 {"resnet18", resnet18_cuda_kernels, resnet18_cuda_cuts},
                                 {"unet", unet_cuda_kernels, unet_cuda_cuts}};
    for (const Library &lib : libraries) {
        const Model m = load_model(lib.model);
        const size_t segments = make_segments(m, parse_cuts(m, lib.cuts())).segments.size();
        ModelKernels k = lib.kernels(m, nullptr);
        EXPECT_EQ(k.forward.size(), segments) << lib.model;
        EXPECT_EQ(k.backward.size(), segments) << lib.model;
        EXPECT_TRUE(k.head) << lib.model;
    }
    const std::string target = tiny_cnn_cuda_backward_0_metadata()->target;
    EXPECT_NE(target.find("cuda"), std::string::npos) << target;
    EXPECT_NE(target.find("cuda_capability_86"), std::string::npos) << target;
}
