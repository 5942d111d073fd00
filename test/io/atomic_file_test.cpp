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

// ------------------------------------------------------------------ StagedFiles

// A set of three files, old then new; `crash_at` > 0 throws from the
// k-th pause after the commit rename (k = 1: right after it; k = 2..4: after
// each move), as a kill there would stop the writer.
void save_set(TempDir &dir, const std::string &tag, int crash_at = 0) {
    int pauses = 0;
    StagedFiles staged(dir.path().string(), [&] {
        if (++pauses == crash_at) throw std::runtime_error("killed");
    });
    for (const char *name : {"weights", "optimizer", "log"}) write_file_atomically(staged.path(name), tag + name);
    staged.commit();
}

void expect_set(TempDir &dir, const std::string &tag) {
    for (const char *name : {"weights", "optimizer", "log"}) EXPECT_EQ(dir.read(name), tag + name) << name;
}

TEST(StagedFiles, ReplacesTheWholeSet) {
    TempDir dir;
    save_set(dir, "old ");
    save_set(dir, "new ");
    expect_set(dir, "new ");
    EXPECT_EQ(files_in(dir.path()), 3u);
    EXPECT_EQ(recover_staged_files(dir.path().string()), Recovery::Clean);
}

TEST(StagedFiles, CrashAfterTheCommitPointIsCompletedByRecovery) {
    for (int k = 1; k <= 4; k++) {
        TempDir dir;
        save_set(dir, "old ");
        EXPECT_THROW(save_set(dir, "new ", k), std::runtime_error) << "pause " << k;
        EXPECT_TRUE(std::filesystem::exists(dir.file(StagedFiles::kCommitted))) << "pause " << k;
        EXPECT_EQ(recover_staged_files(dir.path().string()), Recovery::RolledForward) << "pause " << k;
        expect_set(dir, "new ");
        EXPECT_EQ(files_in(dir.path()), 3u) << "pause " << k;
    }
}

TEST(StagedFiles, CrashBeforeTheCommitPointIsUndoneByRecovery) {
    TempDir dir;
    save_set(dir, "old ");
    // What a kill -9 while staging leaves: a half-written set and an AtomicFile temporary.
    std::filesystem::create_directories(dir.file(StagedFiles::kStaging));
    dir.write(std::string(StagedFiles::kStaging) + "/weights", "new wei");
    dir.write("log.tmp-a1B2c3", "half a log");
    EXPECT_THROW(StagedFiles(dir.path().string()), std::logic_error);  // not over an unfinished save
    EXPECT_EQ(recover_staged_files(dir.path().string()), Recovery::RolledBack);
    expect_set(dir, "old ");
    EXPECT_EQ(files_in(dir.path()), 3u);
    EXPECT_NO_THROW(save_set(dir, "new "));
    expect_set(dir, "new ");
}

TEST(StagedFiles, WriterThatThrowsBeforeCommitLeavesTheOldSet) {
    TempDir dir;
    save_set(dir, "old ");
    EXPECT_THROW(
        {
            StagedFiles staged(dir.path().string());
            write_file_atomically(staged.path("weights"), "new weights");
            throw std::runtime_error("disk full");
        },
        std::runtime_error);
    expect_set(dir, "old ");
    EXPECT_EQ(files_in(dir.path()), 3u);  // .staging removed
}

}  // namespace
}  // namespace segtile
