// moepolicy/detail/mapped_file.hpp — a read-only memory map of a whole file, for readers
// that use a file's bytes in place instead of copying them into a buffer.
//
// On POSIX systems the file is mapped with mmap (read-only, private); the pages come from
// the page cache on first touch and `release` gives the pages of a range that has been
// read back to the system (madvise MADV_DONTNEED), so a reader that walks a file once holds
// a bounded window of it however large it is. Elsewhere (no <sys/mman.h>) the file is read
// into memory, and `release` does nothing.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "moepolicy/detail/file_input.hpp"

#if __has_include(<sys/mman.h>) && __has_include(<unistd.h>) && __has_include(<fcntl.h>)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define MOEPOLICY_HAS_MMAP 1
#else
#define MOEPOLICY_HAS_MMAP 0
#endif

namespace moepolicy::detail {

/// A whole file, mapped read-only. Move-only.
class mapped_file {
 public:
  mapped_file() = default;

  /// Maps `path`.
  ///
  /// Throws: `parse_error` naming the file and the system's reason when it cannot be
  /// opened, is a directory or cannot be mapped.
  explicit mapped_file(const std::filesystem::path& path) {
#if MOEPOLICY_HAS_MMAP
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail_file(path.string(), "is a directory, not a file");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_file(path.string(), std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      fail_file(path.string(), std::string("cannot stat: ") + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      // A pipe or device has no size to map: read it (bounded by the file limit).
      ::close(fd);
      copy_ = read_all_bytes(path);
      bytes_ = copy_;
      return;
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        fail_file(path.string(), std::string("cannot map: ") + std::strerror(err));
      }
      base_ = static_cast<std::byte*>(p);
    }
    ::close(fd);
    bytes_ = std::span<const std::byte>(base_, size_);
#else
    copy_ = read_all_bytes(path);
    bytes_ = copy_;
#endif
  }

  mapped_file(mapped_file&& o) noexcept { *this = std::move(o); }
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      base_ = std::exchange(o.base_, nullptr);
      size_ = std::exchange(o.size_, 0);
      copy_ = std::move(o.copy_);
      bytes_ = base_ != nullptr ? std::span<const std::byte>(base_, size_) : std::span<const std::byte>(copy_);
      o.bytes_ = {};
    }
    return *this;
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() { unmap(); }

  /// The file's bytes, aligned to a page when mapped.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }

  /// Gives back the whole pages inside bytes [offset, offset + length) that have been read
  /// (files of `keep_whole` bytes or more, or any file with `small_too`);
  /// a later read of them faults them in again from the page cache. Only memory use
  /// changes, never the bytes seen.
  void release(std::uint64_t offset, std::uint64_t length, bool small_too = false) const noexcept {
#if MOEPOLICY_HAS_MMAP
    // A file under `keep_whole` bytes stays mapped whole unless told: for a walk, faulting
    // its pages in a second time (the checksum, then the rows) costs more than holding
    // them; a reader that copies what it reads (the whole trace) gives them back anyway,
    // so that the copy and the pages are not both held.
    if (base_ == nullptr || length == 0 || offset >= size_ || (size_ < keep_whole && !small_too)) return;
    // The pages the range touches, partial ones at its ends included: the mapping is only
    // read, so a page that also holds bytes still to be read is faulted in again from the
    // page cache. Rounding inwards instead kept the two end pages of every range of every
    // column, which over a long walk adds up to memory that grows with the file.
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t behind = offset > fault_around ? offset - fault_around : 0;
    const std::uint64_t begin = behind / page * page;
    const std::uint64_t end = std::min<std::uint64_t>((std::min(offset + length, size_) + page - 1) / page * page,
                                                      (size_ + page - 1) / page * page);
    if (end <= begin) return;
    ::madvise(base_ + begin, static_cast<std::size_t>(end - begin), MADV_DONTNEED);
#else
    static_cast<void>(offset);
    static_cast<void>(length);
    static_cast<void>(small_too);
#endif
  }

  /// The system maps up to this many bytes of cached pages around a faulting address
  /// (Linux's fault-around, 64 KiB by default), pages already given back included, so
  /// `release` gives back that much before the range as well.
  static constexpr std::uint64_t fault_around = std::uint64_t{1} << 16;

  /// Files smaller than this are never released piecewise.
  static constexpr std::uint64_t keep_whole = std::uint64_t{1} << 26;

  /// Tells the system the file will be read front to back (read-ahead).
  void sequential() const noexcept {
#if MOEPOLICY_HAS_MMAP
    if (base_ != nullptr) ::madvise(base_, size_, MADV_SEQUENTIAL);
#endif
  }

 private:
  void unmap() noexcept {
#if MOEPOLICY_HAS_MMAP
    if (base_ != nullptr) ::munmap(base_, size_);
#endif
    base_ = nullptr;
    size_ = 0;
  }

  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::byte> copy_;
  std::span<const std::byte> bytes_;
};

}  // namespace moepolicy::detail
