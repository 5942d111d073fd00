#include "io/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test/io/temp_dir.h"

namespace segtile {
namespace {

using testing::TempDir;

size_t files_in(const std::filesystem::path &dir) {
    size_t n = 0;
    for ([[maybe_unused]] const auto &e : std::filesystem::directory_iterator(dir)) n++;
    return n;
}

TEST(AtomicFile, WritesNewContents) {
    TempDir dir;
    dir.write("a.txt", "old");
    write_file_atomically(dir.file("a.txt"), "new contents");
    EXPECT_EQ(dir.read("a.txt"), "new contents");
    EXPECT_EQ(files_in(dir.path()), 1u);  // no temporary file left
}

TEST(AtomicFile, WriterThatFailsMidwayLeavesOldFile) {
    TempDir dir;
    dir.write("weights.bin", "the last good state");
    EXPECT_THROW(write_file_atomically(dir.file("weights.bin"),
                                       [](AtomicFile &f) {
                                           f.write("half of a new st");
                                           throw std::runtime_error("killed before commit");
                                       }),
                 std::runtime_error);
    EXPECT_EQ(dir.read("weights.bin"), "the last good state");
    EXPECT_EQ(files_in(dir.path()), 1u);
}

TEST(AtomicFile, UncommittedFileIsInvisibleUntilCommit) {
    TempDir dir;
    {
        AtomicFile f(dir.file("b.txt"));
        f.write("partial");
        EXPECT_FALSE(std::filesystem::exists(dir.file("b.txt")));
        EXPECT_TRUE(std::filesystem::exists(f.temp_path()));
        f.commit();
        EXPECT_THROW(f.write("more"), std::logic_error);
    }
    EXPECT_EQ(dir.read("b.txt"), "partial");
}

TEST(AtomicFile, UnwritableDirectoryNamesIt) {
    try {
        write_file_atomically("/nonexistent-dir/x.txt", "x");
        FAIL() << "expected an error";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent-dir"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace segtile
