// cachesim_trace IN.mtrace OUT.bin: writes the access sequence `moepolicy replay` replays
// (README, "Traces at scale") in libCacheSim's oracleGeneral binary format, so that
// libCacheSim's `cachesim OUT.bin oracleGeneral lru 64,128 --ignore-obj-size=1` replays the
// same accesses (bench/cachesim_compare.sh).
//
// One 24-byte record per demand access, little-endian, in replay order:
//   u32 real_time  0 (the sequence has no clock);
//   u64 obj_id     the key layer · E + expert (one pool: the shared cache);
//   u32 obj_size   1 (capacities count experts);
//   i64 next_access_vtime  the position (from 0) of the key's next access, -1 for none:
//                  what Belady's MIN reads, the next uses `moepolicy replay` gives its own
//                  Belady (`next_use_index`).
// The canonical file is walked from its memory map and the next uses rebuilt a chunk at a
// time, so any length is written in bounded memory.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/trace/canonical.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cachesim_trace IN.mtrace OUT.bin\n");
    return 2;
  }
  try {
    const moepolicy::canonical_file file(argv[1]);
    const moepolicy::next_use_index index(file);
    moepolicy::next_use_index::cursor next(index);
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(argv[2], "wb"), &std::fclose);
    if (!out) {
      std::fprintf(stderr, "cachesim_trace: cannot open %s for writing\n", argv[2]);
      return 1;
    }
    constexpr std::size_t record = 24, per_buffer = 1 << 16;
    std::vector<unsigned char> buf(record * per_buffer);
    std::size_t filled = 0;
    std::uint64_t position = 0;
    const std::uint64_t experts = file.info().num_experts;
    const auto flush = [&] {
      if (std::fwrite(buf.data(), 1, filled, out.get()) != filled) {
        throw std::runtime_error(std::string("cannot write ") + argv[2]);
      }
      filled = 0;
    };
    moepolicy::cache_replay_config rc;
    moepolicy::detail::for_each_access(file, rc, [&](moepolicy::expert_key k) {
      const std::uint64_t n = next.next(position++);
      const std::uint32_t time = 0, size = 1;
      const std::uint64_t id = k.flat(experts);
      const std::int64_t vtime = n == moepolicy::no_next_use ? -1 : static_cast<std::int64_t>(n);
      unsigned char* p = buf.data() + filled;
      std::memcpy(p, &time, 4);
      std::memcpy(p + 4, &id, 8);
      std::memcpy(p + 12, &size, 4);
      std::memcpy(p + 16, &vtime, 8);
      filled += record;
      if (filled == buf.size()) flush();
    });
    flush();
    next.finish(position);
    std::fprintf(stderr, "cachesim_trace: %llu accesses written to %s\n", static_cast<unsigned long long>(position),
                 argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cachesim_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
