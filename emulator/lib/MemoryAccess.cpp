//===- MemoryAccess.cpp - addresses, bounds and the memory detectors ------===//
///
/// \file
/// Resolves one lane's access of a memref: the row-major address, the
/// bounds of global memrefs and LDS regions, the raw-buffer range check
/// (out-of-range loads read zero, stores are dropped, as the hardware
/// does), and the shadows behind the detectors: written bits of every
/// buffer and LDS byte (reads of never-written memory) and the LDS writer /
/// reader per barrier interval (races between waves).
///
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include <algorithm>

namespace moec::emu::detail {

void Executor::report(FindingKind kind, const POp &p, const Workgroup &wg,
                      const Wave &wave, int lane, std::string detail) {
  ++result.findingCounts[static_cast<int>(kind)];
  if (result.findings.size() >= launch.maxFindings)
    return;
  Finding finding;
  finding.kind = kind;
  finding.launch = label;
  finding.kernel = program.kernelName;
  finding.location = describeLocation(p.op);
  finding.opName = describeOpName(p.op);
  finding.workgroup = wg.id;
  finding.wave = wave.id;
  finding.lane = lane;
  finding.detail = std::move(detail);
  result.findings.push_back(std::move(finding));
}

int64_t Executor::linearIndex(const ValueInfo &memInfo, const Wave &wave,
                              const std::vector<unsigned> &indexSlots,
                              size_t first, int lane) {
  if (memInfo.shape.size() == 1) {
    int64_t index;
    std::memcpy(&index, wave.regs[indexSlots[first]].lane(lane, 8), 8);
    return index;
  }
  int64_t linear = 0;
  for (size_t d = 0; d < memInfo.shape.size(); ++d) {
    const RtValue &v = wave.regs[indexSlots[first + d]];
    const int64_t i = static_cast<int64_t>(getBits(v.lane(lane, 8), 64, 0));
    linear = linear * memInfo.shape[d] + i;
  }
  return linear;
}

namespace {

/// "load of 16 bytes at byte 64 of WHAT".
std::string rangeText(bool isWrite, bool atomic, unsigned bytes,
                      int64_t offset, const std::string &what) {
  const char *verb = atomic ? "atomic" : isWrite ? "store" : "load";
  return std::string(verb) + " of " + std::to_string(bytes) +
         " bytes at byte " + std::to_string(offset) + " of " + what;
}

/// Whether any of `bytes` flags is 0.
inline bool anyZero(const uint8_t *flags, unsigned bytes) {
  int zero = 0;
  for (unsigned b = 0; b < bytes; ++b)
    zero |= flags[b] == 0;
  return zero != 0;
}

/// One LDS access's bytes in the shadow's arrays.
struct ShadowBytes {
  uint32_t *writeEpoch;
  uint32_t *readEpoch;
  int16_t *writer;
  int16_t *reader;
  uint8_t *written;
};

/// Whether any of `bytes` shadow bytes has a finding for a (non-atomic)
/// load or store: a branch-free pass (the common case has none).
[[gnu::always_inline]] inline bool suspectBytes(const ShadowBytes &s,
                                                unsigned bytes, bool isWrite,
                                                uint32_t epoch, int16_t self) {
  int bad = 0;
  if (isWrite) {
    for (unsigned b = 0; b < bytes; ++b)
      bad |= (int(s.writeEpoch[b] == epoch) & int(s.writer[b] != self)) |
             (int(s.readEpoch[b] == epoch) & int(s.reader[b] != self));
  } else {
    for (unsigned b = 0; b < bytes; ++b)
      bad |= int(s.written[b] == 0) |
             (int(s.writeEpoch[b] == epoch) & int(s.writer[b] != self));
  }
  return bad != 0;
}

/// Records a (non-atomic) load or store of `bytes` shadow bytes; returns
/// how many bytes became written.
[[gnu::always_inline]] inline unsigned updateBytes(const ShadowBytes &s,
                                                   unsigned bytes,
                                                   bool isWrite, uint32_t epoch,
                                                   int16_t self) {
  unsigned fresh = 0;
  if (isWrite) {
    for (unsigned b = 0; b < bytes; ++b) {
      fresh += s.written[b] == 0;
      s.written[b] = 1;
      s.writer[b] = self;
      s.writeEpoch[b] = epoch;
    }
  } else {
    // The first reader of the interval, or several.
    for (unsigned b = 0; b < bytes; ++b) {
      const bool first = s.readEpoch[b] != epoch;
      s.reader[b] = first || s.reader[b] == self ? self : int16_t(-2);
      s.readEpoch[b] = epoch;
    }
  }
  return fresh;
}

} // namespace

void Executor::reportOutOfBounds(const POp &p, const Workgroup &wg,
                                 const Wave &wave, int lane,
                                 const MemRefDesc &mem, int64_t offset,
                                 unsigned bytes, bool isWrite, bool atomic) {
  std::string what;
  if (mem.space == Space::Lds) {
    what = "LDS buffer " + std::to_string(mem.buffer) + " (" +
           std::to_string(program.lds[mem.buffer].bytes) + " bytes)";
  } else if (mem.space != Space::RawBuffer &&
             (offset < 0 || offset + int64_t(bytes) > mem.extentBytes)) {
    what = "global memref over buffer '" + memory.name(mem.buffer) + "' (" +
           std::to_string(mem.extentBytes) + " bytes)";
  } else {
    what = "buffer '" + memory.name(mem.buffer) + "' (" +
           std::to_string(memory.size(mem.buffer)) + " bytes registered)";
  }
  report(FindingKind::OutOfBounds, p, wg, wave, lane,
         rangeText(isWrite, atomic, bytes, offset, what));
}

void Executor::reportLdsBytes(const POp &p, Workgroup &wg, const Wave &wave,
                              int lane, const MemRefDesc &mem, int64_t offset,
                              unsigned bytes, bool isWrite, bool atomic) {
  const int64_t at = mem.baseBytes + offset;
  const uint32_t epoch = wg.epoch;
  const int16_t self = static_cast<int16_t>(wave.id);
  const uint32_t *writeEpoch = wg.shadow.writeEpoch.data() + at;
  const uint32_t *readEpoch = wg.shadow.readEpoch.data() + at;
  const int16_t *writer = wg.shadow.writer.data() + at;
  const int16_t *reader = wg.shadow.reader.data() + at;
  const uint8_t *written = wg.shadow.written.data() + at;
  for (unsigned b = 0; b < bytes; ++b) {
    auto byteText = [&] {
      return "LDS buffer " + std::to_string(mem.buffer) + " byte " +
             std::to_string(offset + b);
    };
    if (atomic) {
      if (!written[b]) {
        report(FindingKind::UninitializedRead, p, wg, wave, lane,
               "atomic on never-written " + byteText());
        return;
      }
      continue;
    }
    if (!isWrite) {
      if (!written[b]) {
        report(FindingKind::UninitializedRead, p, wg, wave, lane,
               "load of never-written " + byteText());
        return;
      }
      if (writeEpoch[b] == epoch && writer[b] != self) {
        report(FindingKind::LdsRace, p, wg, wave, lane,
               "load of " + byteText() + " written by wave " +
                   std::to_string(writer[b]) +
                   " in the same barrier interval");
        return;
      }
    } else {
      if (writeEpoch[b] == epoch && writer[b] != self) {
        report(FindingKind::LdsRace, p, wg, wave, lane,
               "store to " + byteText() + " also written by wave " +
                   std::to_string(writer[b]) +
                   " in the same barrier interval");
        return;
      }
      if (readEpoch[b] == epoch && reader[b] != self) {
        report(FindingKind::LdsRace, p, wg, wave, lane,
               "store to " + byteText() + " read by " +
                   (reader[b] == -2 ? std::string("several waves")
                                    : "wave " + std::to_string(reader[b])) +
                   " in the same barrier interval");
        return;
      }
    }
  }
}

void Executor::reportUnwritten(const POp &p, const Workgroup &wg,
                               const Wave &wave, int lane,
                               const MemRefDesc &mem, int64_t offset,
                               unsigned bytes, const uint8_t *shadow) {
  for (unsigned b = 0; b < bytes; ++b)
    if (!shadow[b]) {
      report(FindingKind::UninitializedRead, p, wg, wave, lane,
             "load of never-written byte " + std::to_string(offset + b) +
                 " of buffer '" + memory.name(mem.buffer) + "'");
      return;
    }
}

uint8_t *Executor::access(const POp &p, Workgroup &wg, const Wave &wave,
                          int lane, const MemRefDesc &mem, int64_t index,
                          unsigned bytes, bool isWrite, bool atomic) {
  // `index` is a byte offset (callers scale element indices). An atomic is a
  // read and a write: it must find its bytes initialised, and it takes no
  // part in race detection (atomics are how waves may share a location).
  // Findings are built out of line (the report* functions).
  const int64_t offset = index;
  if (mem.space == Space::Lds) {
    if (offset < 0 || offset + bytes > mem.extentBytes) {
      reportOutOfBounds(p, wg, wave, lane, mem, offset, bytes, isWrite, atomic);
      return nullptr;
    }
    const int64_t at = mem.baseBytes + offset;
    const uint32_t epoch = wg.epoch;
    const int16_t self = static_cast<int16_t>(wave.id);
    const ShadowBytes shadow{wg.shadow.writeEpoch.data() + at,
                             wg.shadow.readEpoch.data() + at,
                             wg.shadow.writer.data() + at,
                             wg.shadow.reader.data() + at,
                             wg.shadow.written.data() + at};
    // The check and the update with the common sizes as constants (unrolled
    // vector code); reportLdsBytes finds and reports the first finding.
    auto check = [&](unsigned n) {
      return suspectBytes(shadow, n, isWrite, epoch, self);
    };
    auto update = [&](unsigned n) {
      return updateBytes(shadow, n, isWrite, epoch, self);
    };
    const bool suspect = atomic || (bytes == 16  ? check(16)
                                    : bytes == 8 ? check(8)
                                    : bytes == 4 ? check(4)
                                                 : check(bytes));
    if (suspect)
      reportLdsBytes(p, wg, wave, lane, mem, offset, bytes, isWrite, atomic);
    if (!atomic)
      writes += bytes == 16  ? update(16)
                : bytes == 8 ? update(8)
                : bytes == 4 ? update(4)
                             : update(bytes);
    if (isWrite)
      result.stats.ldsBytesWritten += bytes;
    if (!isWrite || atomic)
      result.stats.ldsBytesRead += bytes;
    return wg.lds.data() + at;
  }

  if (mem.buffer >= views.size())
    refreshViews();
  const BufferView &view = views[mem.buffer];
  if (mem.space == Space::RawBuffer) {
    // The descriptor's range check (num_records = validBytes, or the memref
    // size): the whole access is in or out; out reads 0, a store is dropped.
    if (offset < 0 || offset + int64_t(bytes) > mem.numRecords) {
      if (isWrite)
        ++result.stats.rawStoresDropped;
      else
        ++result.stats.rawLoadsOutOfRange;
      return nullptr;
    }
  } else if (offset < 0 || offset + int64_t(bytes) > mem.extentBytes) {
    reportOutOfBounds(p, wg, wave, lane, mem, offset, bytes, isWrite, atomic);
    return nullptr;
  }
  // A memref.view starts baseBytes into its buffer; the checks above are
  // the view's own, those below the buffer's.
  const int64_t at = mem.baseBytes + offset;
  if (at + int64_t(bytes) > int64_t(view.size)) {
    reportOutOfBounds(p, wg, wave, lane, mem, offset, bytes, isWrite, atomic);
    return nullptr;
  }
  uint8_t *shadow = view.written + at;
  if (view.shared) {
    // Another process reads and sets these flags too: byte atomics.
    uint8_t flags[16];
    uint8_t *seen = bytes <= sizeof(flags) ? flags : nullptr;
    bool unwritten = false;
    for (unsigned b = 0; b < bytes; ++b) {
      const uint8_t flag = __atomic_load_n(shadow + b, __ATOMIC_RELAXED);
      unwritten |= flag == 0;
      if (seen)
        seen[b] = flag;
    }
    if (isWrite && !atomic) {
      if (unwritten)
        ++writes;
      for (unsigned b = 0; b < bytes; ++b)
        __atomic_store_n(shadow + b, uint8_t(1), __ATOMIC_RELAXED);
    } else if (unwritten) {
      reportUnwritten(p, wg, wave, lane, mem, offset, bytes,
                      seen ? seen : shadow);
    }
  } else if (isWrite && !atomic) {
    if (anyZero(shadow, bytes))
      ++writes;
    std::memset(shadow, 1, bytes);
  } else if (anyZero(shadow, bytes)) {
    reportUnwritten(p, wg, wave, lane, mem, offset, bytes, shadow);
  }
  countGlobal(mem.buffer, at, bytes, !isWrite || atomic, isWrite);
  return view.data + at;
}

void Executor::refreshViews() {
  views.resize(memory.bufferCount());
  for (unsigned b = 0; b < views.size(); ++b)
    views[b] = {memory.data(b), memory.written(b), memory.size(b),
                memory.isExternal(b)};
}

void Executor::countGlobal(unsigned buffer, int64_t offset, unsigned bytes,
                           bool read, bool written) {
  auto mark = [&](std::vector<std::vector<uint64_t>> &lines) {
    if (lines.size() <= buffer)
      lines.resize(memory.bufferCount());
    std::vector<uint64_t> &bits = lines[buffer];
    if (bits.empty())
      bits.assign((memory.size(buffer) / 64 + 64) / 64, 0);
    for (int64_t line = offset / 64, last = (offset + bytes - 1) / 64;
         line <= last; ++line)
      bits[size_t(line) / 64] |= uint64_t(1) << (line % 64);
  };
  if (read) {
    result.stats.globalBytesRead += bytes;
    mark(linesRead);
  }
  if (written) {
    result.stats.globalBytesWritten += bytes;
    mark(linesWritten);
  }
}

void Executor::finishCounters() {
  auto count = [](const std::vector<std::vector<uint64_t>> &lines) {
    uint64_t n = 0;
    for (const auto &bits : lines)
      for (uint64_t word : bits)
        n += static_cast<uint64_t>(__builtin_popcountll(word));
    return n;
  };
  result.stats.globalLinesRead = count(linesRead);
  result.stats.globalLinesWritten = count(linesWritten);
  result.stats.scaledMfmas = result.stats.mfmas;
  result.stats.otherInstructions = result.stats.waveOps - result.stats.mfmas;
}

void Executor::countBankConflicts(const int64_t *addresses, uint64_t mask,
                                  unsigned bytes) {
  // gfx950 LDS model (docs/emulator.md): 64 banks of 4 bytes; a wave's
  // access is served in phases of lanes whose dwords fill the 64 banks
  // once (64 / dwords-per-lane lanes, dwords rounded up to 1, 2 or 4); in
  // a phase a bank serves one distinct dword per cycle (lanes reading the
  // same dword share it), so the phase takes as many cycles as its busiest
  // bank has distinct dwords, and every cycle past the first is a conflict.
  constexpr unsigned kBanks = 64;
  const unsigned dwordsPerLane = bytes <= 4 ? 1 : bytes <= 8 ? 2 : 4;
  const int lanesPerPhase = int(kBanks / dwordsPerLane);
  for (int phase = 0; phase < kLanes; phase += lanesPerPhase) {
    // The common case first: the phase's active lanes access consecutive
    // dword-aligned chunks in lane order, at most kBanks dwords in all, so
    // every dword has its own bank (no conflict).
    {
      int64_t expect = 0;
      bool first = true;
      bool consecutive = bytes % 4 == 0 && bytes <= 16;
      for (int l = phase; l < phase + lanesPerPhase && consecutive; ++l) {
        if (!(mask >> l & 1))
          continue;
        if (first)
          expect = addresses[l];
        first = false;
        consecutive = addresses[l] == expect && expect >= 0 && expect % 4 == 0;
        expect += bytes;
      }
      if (consecutive) {
        // No active lane (nothing counted) or one run of distinct dwords.
        continue;
      }
    }
    // Aligned chunks of 4, 8 or 16 bytes at most 16 lanes to a phase: a
    // lane's chunk c covers the dwords of banks (c % lanesPerPhase) *
    // dwordsPerLane onwards, so a bank's distinct dwords are the distinct
    // chunks of its group.
    if ((bytes == 8 || bytes == 16) && bytes / 4 == dwordsPerLane) {
      // (group, chunk) keys sorted (lane order is usually already sorted),
      // then the distinct chunks of each group counted.
      uint64_t keys[kLanes];
      unsigned count = 0;
      bool aligned = true;
      for (int l = phase; l < phase + lanesPerPhase; ++l) {
        if (!(mask >> l & 1))
          continue;
        // Powers of two: shifts and masks, not divisions.
        const int shift = bytes == 16 ? 4 : 3;
        if (addresses[l] < 0 || (addresses[l] & (bytes - 1)) != 0 ||
            addresses[l] >> shift >= int64_t(1) << 48) {
          aligned = false;
          break;
        }
        const uint64_t chunk = uint64_t(addresses[l]) >> shift;
        const uint64_t key = (chunk & uint64_t(lanesPerPhase - 1)) << 48 | chunk;
        unsigned i = count++;
        for (; i > 0 && keys[i - 1] > key; --i)
          keys[i] = keys[i - 1];
        keys[i] = key;
      }
      if (aligned) {
        unsigned busiest = 0, run = 0;
        for (unsigned i = 0; i < count; ++i) {
          if (i > 0 && keys[i] == keys[i - 1])
            continue;
          run = i > 0 && keys[i] >> 48 == keys[i - 1] >> 48 ? run + 1 : 1;
          busiest = std::max(busiest, run);
        }
        if (count)
          result.stats.ldsBankConflicts += busiest - 1;
        continue;
      }
    }
    // The distinct dwords of the phase (the first kBanks * 4 the lanes
    // touch, in lane order) through a small hash set whose entries are
    // current only with this phase's generation (nothing to clear).
    struct DwordSet {
      int64_t key[1024];
      uint32_t generation[1024] = {};
      uint32_t current = 0;
    };
    thread_local DwordSet set;
    if (++set.current == 0) {
      std::fill(set.generation, set.generation + 1024, 0u);
      set.current = 1;
    }
    unsigned perBank[kBanks] = {};
    unsigned n = 0, busiest = 0;
    for (int l = phase; l < phase + lanesPerPhase; ++l) {
      if (!(mask >> l & 1))
        continue;
      for (int64_t d = addresses[l] / 4, last = (addresses[l] + bytes - 1) / 4;
           d <= last && n < kBanks * 4; ++d, ++n) {
        size_t slot = size_t(uint64_t(d) * 0x9E3779B97F4A7C15ull >> 54);
        bool seen = false;
        while (set.generation[slot] == set.current) {
          if (set.key[slot] == d) {
            seen = true;
            break;
          }
          slot = (slot + 1) & 1023;
        }
        if (seen)
          continue;
        set.generation[slot] = set.current;
        set.key[slot] = d;
        busiest = std::max(busiest, ++perBank[size_t(d) % kBanks]);
      }
    }
    if (n == 0)
      continue;
    result.stats.ldsBankConflicts += busiest - 1;
  }
}
} // namespace moec::emu::detail
