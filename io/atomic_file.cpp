#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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
    // The rename itself is durable only once the directory entry is synced.
    const int dir = open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY);
    if (dir >= 0) {
        fsync(dir);
        close(dir);
    }
}

void write_file_atomically(const std::string &path, const std::function<void(AtomicFile &)> &fill) {
    AtomicFile f(path);
    fill(f);
    f.commit();
}

void write_file_atomically(const std::string &path, std::string_view contents) {
    write_file_atomically(path, [&](AtomicFile &f) { f.write(contents); });
}

}  // namespace segtile
