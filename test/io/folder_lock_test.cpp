#include "io/folder_lock.h"
#include "spec/errors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "test/io/temp_dir.h"

namespace segtile {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// flock() locks belong to an open file description, so a second FolderLock
// in this process conflicts exactly as a second process would.
TEST(FolderLock, SecondHolderIsRefusedNamingTheFirstsPid) {
    testing::TempDir dir;
    FolderLock first(dir.path().string());
    try {
        FolderLock second(dir.path().string());
        FAIL() << "a second lock on one folder was granted";
    } catch (const DataError &e) {
        EXPECT_THAT(e.what(), HasSubstr("in use by another segtile process"));
        EXPECT_THAT(e.what(), HasSubstr("pid " + std::to_string(getpid())));
    }
}

TEST(FolderLock, ReleasedWhenTheHolderGoes) {
    testing::TempDir dir;
    { FolderLock first(dir.path().string()); }
    EXPECT_NO_THROW(FolderLock again(dir.path().string()));
}

TEST(FolderLock, RemovesOnlyAFolderThatHoldsNothingElse) {
    testing::TempDir dir;
    const fs::path empty = dir.path() / "empty", full = dir.path() / "full";
    fs::create_directories(empty);
    fs::create_directories(full);
    dir.write("full/weights.safetensors", "x");
    FolderLock(empty.string()).remove_folder_if_empty();
    FolderLock(full.string()).remove_folder_if_empty();
    EXPECT_FALSE(fs::exists(empty));
    EXPECT_TRUE(fs::exists(full / "weights.safetensors"));
    EXPECT_FALSE(fs::exists(full / FolderLock::kName));
}

TEST(FolderLock, MissingFolderNamesIt) {
    testing::TempDir dir;
    try {
        FolderLock lock((dir.path() / "nowhere").string());
        FAIL() << "locked a folder that does not exist";
    } catch (const std::runtime_error &e) {
        EXPECT_THAT(e.what(), HasSubstr("nowhere/.lock"));
    }
}

}  // namespace
}  // namespace segtile
