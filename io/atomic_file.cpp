#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace segtile {

namespace {

std::string directory_of(const std::string &path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

[[noreturn]] void fail(const std::string &what, const std::string &path) {
    throw std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

// fsync of a directory: makes the renames and removals in it durable.
// False (errno set) if it could not.
bool try_sync_directory(const std::string &dir) {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return false;
    const int rc = fsync(fd);
    const int err = errno;
    close(fd);
    errno = err;
    return rc == 0;
}

void sync_directory(const std::string &dir) {
    if (!try_sync_directory(dir)) fail("cannot flush directory", dir);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temp_(path_ + ".tmp-XXXXXX") {
    fd_ = mkstemp(temp_.data());
    if (fd_ < 0)
        throw std::runtime_error("cannot create a file in '" + directory_of(path_) + "' to write '" + path_ +
                                 "': " + std::strerror(errno) + "; choose a writable directory");
    // mkstemp creates 0600; results (weights, plots) should be readable by
    // others as files made by open() usually are. (Reading the umask would
    // mean setting it: process-wide and racy.)
    fchmod(fd_, 0644);
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) close(fd_);
    if (!committed_) unlink(temp_.c_str());
}

void AtomicFile::write(const void *data, size_t bytes) {
    if (fd_ < 0) throw std::logic_error("AtomicFile::write after commit of '" + path_ + "'");
    const char *p = static_cast<const char *>(data);
    while (bytes > 0) {
        const ssize_t n = ::write(fd_, p, bytes);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("cannot write", path_);
        }
        if (n == 0) {  // a regular file that takes no bytes: treat as full
            errno = ENOSPC;
            fail("cannot write", path_);
        }
        p += n;
        bytes -= (size_t)n;
    }
}

void AtomicFile::commit() {
    if (fd_ < 0) throw std::logic_error("AtomicFile::commit twice for '" + path_ + "'");
    if (fsync(fd_) != 0) fail("cannot flush", path_);
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) fail("cannot close", path_);
    if (rename(temp_.c_str(), path_.c_str()) != 0) fail("cannot replace", path_);
    committed_ = true;
    // The rename is durable only once the directory is synced; the new file
    // is in place either way, so a failure here is not the writer's to undo.
    try_sync_directory(directory_of(path_));
}

void write_file_atomically(const std::string &path, const std::function<void(AtomicFile &)> &fill) {
    AtomicFile f(path);
    fill(f);
    f.commit();
}

void write_file_atomically(const std::string &path, std::string_view contents) {
    write_file_atomically(path, [&](AtomicFile &f) { f.write(contents); });
}

// ------------------------------------------------------------------ StagedFiles

namespace {

namespace fs = std::filesystem;

// Roll forward: moves every file of `dir`/.committed into `dir` (those
// named in `order` first, in that order; any others by name), then removes
// the empty folder. Each move is one rename, so a crash in here leaves the
// rest for the next call.
void finish_commit(const std::string &dir, const std::vector<std::string> &order,
                   const std::function<void()> &between) {
    const std::string committed = dir + "/" + StagedFiles::kCommitted;
    std::vector<std::string> names, rest;
    for (const auto &e : fs::directory_iterator(committed)) rest.push_back(e.path().filename().string());
    std::sort(rest.begin(), rest.end());
    for (const auto &n : order)
        if (std::find(rest.begin(), rest.end(), n) != rest.end()) names.push_back(n);
    for (const auto &n : rest)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    for (const auto &n : names) {
        const std::string from = committed + "/" + n, to = dir + "/" + n;
        if (rename(from.c_str(), to.c_str()) != 0) fail("cannot move a saved file to", to);
        if (between) between();
    }
    sync_directory(dir);
    if (rmdir(committed.c_str()) != 0) fail("cannot remove", committed);
    sync_directory(dir);
}

// "<name>.tmp-XXXXXX": a temporary file of AtomicFile (mkstemp's six characters).
bool is_atomic_temp(const std::string &name) {
    const size_t at = name.rfind(".tmp-");
    return at != std::string::npos && at > 0 && name.size() == at + 5 + 6;
}

}  // namespace

StagedFiles::StagedFiles(std::string dir, std::function<void()> between_steps)
    : dir_(std::move(dir)), staging_(dir_ + "/" + kStaging), between_(std::move(between_steps)) {
    std::error_code ec;
    if (fs::exists(dir_ + "/" + kCommitted, ec) || fs::exists(staging_, ec))
        throw std::logic_error("StagedFiles: '" + dir_ + "' holds an unfinished save; run recover_staged_files first");
    if (mkdir(staging_.c_str(), 0755) != 0) fail("cannot create the folder", staging_);
}

StagedFiles::~StagedFiles() {
    if (committed_) return;
    std::error_code ec;
    fs::remove_all(staging_, ec);  // best effort: recovery removes what is left
}

std::string StagedFiles::path(const std::string &name) {
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) names_.push_back(name);
    return staging_ + "/" + name;
}

void StagedFiles::commit() {
    if (committed_) throw std::logic_error("StagedFiles::commit twice in '" + dir_ + "'");
    for (const auto &n : names_)
        if (!fs::exists(staging_ + "/" + n)) throw std::logic_error("StagedFiles: '" + n + "' was not written");
    sync_directory(staging_);  // every file's name is durable before the commit
    const std::string committed = dir_ + "/" + kCommitted;
    if (rename(staging_.c_str(), committed.c_str()) != 0) fail("cannot commit the save", committed);
    committed_ = true;
    sync_directory(dir_);  // the commit point is durable
    if (between_) between_();
    finish_commit(dir_, names_, between_);
}

Recovery recover_staged_files(const std::string &dir) {
    Recovery r = Recovery::Clean;
    std::error_code ec;
    if (fs::is_directory(dir + "/" + StagedFiles::kCommitted, ec)) {
        finish_commit(dir, {}, {});
        r = Recovery::RolledForward;
    }
    const std::string staging = dir + "/" + StagedFiles::kStaging;
    if (fs::exists(staging, ec)) {
        fs::remove_all(staging, ec);
        if (ec) throw std::runtime_error("cannot remove the unfinished save '" + staging + "': " + ec.message());
        sync_directory(dir);
        if (r == Recovery::Clean) r = Recovery::RolledBack;
    }
    bool removed = false;
    for (const auto &e : fs::directory_iterator(dir, ec))
        if (e.is_regular_file() && is_atomic_temp(e.path().filename().string())) {
            fs::remove(e.path(), ec);
            removed = true;
        }
    if (removed) sync_directory(dir);
    return r;
}

}  // namespace segtile
