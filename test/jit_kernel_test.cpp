// JIT kernels' dumps for reading what a schedule became
// (SEGTILE_DUMP_STMT, SEGTILE_DUMP_ASM; docs/benchmarks.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "generators/jit_kernel.h"
#include "test/layer_cases.h"

namespace segtile {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path &p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

// Unsets the variable when the test ends, pass or fail.
struct EnvVar {
    explicit EnvVar(const std::string &value) { setenv("SEGTILE_DUMP_STMT", value.c_str(), 1); }
    ~EnvVar() { unsetenv("SEGTILE_DUMP_STMT"); }
};

// A folder gets a statement per kernel, named for the model, segment and
// pass: a step compiles dozens of kernels, and one file kept only the last.
TEST(JitKernel, DumpsAStatementPerKernelIntoAFolder) {
    const fs::path dir = fs::path(::testing::TempDir()) / "segtile_stmt_dump" / "";
    fs::remove_all(dir);
    const Model m = segtile::testing::conv_model(4, 8, 3, 1, 1, 1, 1, true);
    const SegmentLayout layout = make_segments(m, {});
    {
        EnvVar env(dir.string());
        JitKernel forward(m, layout, KernelKind::Forward, 0, Halide::Float(32));
        JitKernel backward(m, layout, KernelKind::Backward, 0, Halide::Float(32));
    }
    const std::string name = c_identifier(m.name);
    const std::string f = read(dir / (name + "_segment0_forward.stmt"));
    const std::string b = read(dir / (name + "_segment0_backward.stmt"));
    EXPECT_NE(f.find("produce out_conv"), std::string::npos) << f.substr(0, 300);
    EXPECT_NE(b.find("produce grad_conv_weight"), std::string::npos) << b.substr(0, 300);
    EXPECT_EQ(f.find("grad_conv_weight"), std::string::npos);  // each file holds its own kernel
}

// Any other value is one file, as before: the last kernel compiled.
TEST(JitKernel, DumpsIntoOneFileWhenNotGivenAFolder) {
    const fs::path file = fs::path(::testing::TempDir()) / "segtile_one.stmt";
    fs::remove(file);
    const Model m = segtile::testing::conv_model(4, 8, 3, 1, 1, 1, 1, true);
    const SegmentLayout layout = make_segments(m, {});
    {
        EnvVar env(file.string());
        JitKernel backward(m, layout, KernelKind::Backward, 0, Halide::Float(32));
    }
    ASSERT_TRUE(fs::is_regular_file(file));
    EXPECT_NE(read(file).find("produce grad_conv_weight"), std::string::npos);
}

}  // namespace
}  // namespace segtile
