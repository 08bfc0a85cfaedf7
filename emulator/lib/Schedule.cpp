//===- Schedule.cpp - launches, rounds, residency and deadlocks -----------===//
///
/// \file
/// Runs the launches of one run in a cooperative scheduler. Workgroups are
/// resident up to a limit per launch and scheduled round-robin over all
/// launches; a barrier releases when every live wave of the workgroup has
/// reached it. A wave yields at every scf.while iteration boundary and at
/// rocdl.s.sleep, so spin-waits make progress, and a round in which nothing
/// can change any more is reported as a deadlock.
///
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace moec::emu::detail {

using llvm::failure;
using llvm::success;
using mlir::FailureOr;
using mlir::LogicalResult;

LogicalResult Executor::bindArguments(llvm::ArrayRef<KernelArgValue> args) {
  if (args.size() != program.argSlots.size()) {
    error = "emulator: " + prefix() + program.kernelName + " takes " +
            std::to_string(program.argSlots.size()) + " arguments, got " +
            std::to_string(args.size());
    return failure();
  }
  argValues.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ValueInfo &vi = info(program.argSlots[i]);
    RtValue &value = argValues[i];
    const std::string which = "argument " + std::to_string(i) + " of " +
                              program.kernelName;
    if (vi.isMemRef) {
      if (args[i].kind != KernelArgValue::Kind::Buffer ||
          args[i].buffer >= memory.bufferCount()) {
        error = "emulator: " + prefix() + which + " must be a registered buffer";
        return failure();
      }
      if (vi.space != Space::Global) {
        error = "emulator: " + prefix() + which + " must be a global memref";
        return failure();
      }
      int64_t extent = vi.memElemBytes;
      for (int64_t d : vi.shape)
        extent *= d;
      const bool shared = memory.isExternal(args[i].buffer);
      value.mem = {Space::Global, args[i].buffer, 0, extent, 0, shared};
      external |= shared;
      continue;
    }
    if (args[i].kind != KernelArgValue::Kind::Scalar || vi.elem != Elem::Int ||
        vi.count != 1) {
      error = "emulator: " + prefix() + which + " must be an integer scalar";
      return failure();
    }
    value.shape(true, vi.laneBytes);
    setBits(value.bytes.data(), vi.elemBits, 0,
            static_cast<uint64_t>(args[i].scalar) & widthMask(vi.width));
  }
  return success();
}

std::unique_ptr<Workgroup> Executor::makeWorkgroup(int64_t linearId) {
  std::unique_ptr<Workgroup> wg;
  if (spare.empty()) {
    wg = std::make_unique<Workgroup>();
  } else {
    wg = std::move(spare.back());
    spare.pop_back();
  }
  wg->id = {linearId % launch.grid[0],
            (linearId / launch.grid[0]) % launch.grid[1],
            linearId / (launch.grid[0] * launch.grid[1])};
  wg->epoch = 1;
  // LDS starts poisoned: every byte unwritten.
  wg->lds.assign(size_t(program.ldsBytes), 0xFF);
  wg->shadow.reset(size_t(program.ldsBytes));
  wg->waves.resize(wavesPerGroup);
  for (int w = 0; w < wavesPerGroup; ++w) {
    Wave &wave = wg->waves[w];
    // A fresh wave that keeps a finished one's storage: every register is
    // written before it is read (SSA), so old contents never show.
    Wave fresh;
    fresh.regs = std::move(wave.regs);
    fresh.frames = std::move(wave.frames);
    fresh.frames.clear();
    wave = std::move(fresh);
    wave.id = w;
    wave.regs.resize(program.values.size());
    for (size_t i = 0; i < program.argSlots.size(); ++i)
      wave.regs[program.argSlots[i]] = argValues[i];
    for (size_t r = 0; r < program.lds.size(); ++r) {
      RtValue &v = wave.regs[program.lds[r].slot];
      v.mem = {Space::Lds, static_cast<unsigned>(r), program.lds[r].offset,
               program.lds[r].bytes, 0};
    }
    Frame body;
    body.kind = FrameKind::Body;
    body.block = static_cast<int>(program.entry);
    const int64_t lanes = std::min<int64_t>(kLanes, threadsPerGroup - w * kLanes);
    body.mask = lanes >= kLanes ? kAllLanes : (uint64_t(1) << lanes) - 1;
    wave.frames.push_back(std::move(body));
  }
  ++result.stats.workgroups;
  result.stats.waves += wavesPerGroup;
  return wg;
}

LogicalResult Executor::prepare(llvm::ArrayRef<KernelArgValue> args) {
  for (int d = 0; d < 3; ++d) {
    block[d] = launch.block[d] ? launch.block[d] : program.knownBlockSize[d];
    if (block[d] <= 0) {
      error = "emulator: " + prefix() + program.kernelName +
              ": no workgroup size (launch.block or known_block_size)";
      return failure();
    }
    if (launch.grid[d] <= 0) {
      error = "emulator: " + prefix() + "grid dimensions must be positive";
      return failure();
    }
  }
  threadsPerGroup = block[0] * block[1] * block[2];
  wavesPerGroup = static_cast<int>((threadsPerGroup + kLanes - 1) / kLanes);
  total = launch.grid[0] * launch.grid[1] * launch.grid[2];
  return bindArguments(args);
}

bool Executor::isIdle(const Wave &wave) const {
  if (!wave.retracing || wave.retraceWrites != writes ||
      wave.retraceBarriers != wave.barrierStops ||
      wave.frames.size() <= wave.retraceDepth)
    return false;
  const Frame &loop = wave.frames[wave.retraceDepth];
  return loop.owner == wave.retraceOp &&
         (loop.kind == FrameKind::WhileBefore ||
          loop.kind == FrameKind::WhileAfter);
}

LogicalResult Executor::runRound(bool &progress) {
  const unsigned cap = std::max(1u, launch.maxResidentWorkgroups);
  while (resident.size() < cap && next < total) {
    resident.push_back(makeWorkgroup(next++));
    progress = true;
  }
  for (auto it = resident.begin(); it != resident.end();) {
    Workgroup &wg = **it;
    for (Wave &wave : wg.waves) {
      if (wave.state != WaveState::Ready)
        continue;
      switch (runWave(wg, wave)) {
      case Stop::Error:
        return failure();
      case Stop::Done:
        wave.state = WaveState::Done;
        progress = true;
        break;
      case Stop::Barrier:
        // Arriving changes nothing another wave can see; the release below
        // (when every live wave is here) is the progress.
        wave.state = WaveState::AtBarrier;
        break;
      case Stop::Yield:
        ++result.stats.yields;
        if (!isIdle(wave))
          progress = true;
        break;
      }
    }
    bool anyWaiting = false, allDone = true;
    for (const Wave &wave : wg.waves) {
      anyWaiting |= wave.state == WaveState::AtBarrier;
      allDone &= wave.state == WaveState::Done;
    }
    // Every live wave is at the barrier (finished waves do not hold it, as
    // s_barrier counts only waves that have not ended).
    bool allArrived = anyWaiting;
    for (const Wave &wave : wg.waves)
      allArrived &= wave.state != WaveState::Ready;
    if (allArrived) {
      for (Wave &wave : wg.waves)
        if (wave.state == WaveState::AtBarrier)
          wave.state = WaveState::Ready;
      ++wg.epoch;
      ++result.stats.barriers;
      progress = true;
    }
    if (allDone) {
      spare.push_back(std::move(*it));
      it = resident.erase(it);
      progress = true;
    } else {
      ++it;
    }
  }
  return success();
}

void Executor::describeStall(std::vector<std::string> &spinners,
                             std::vector<std::string> &notes) const {
  for (const auto &wg : resident) {
    for (const Wave &wave : wg->waves) {
      if (wave.state != WaveState::Ready || !isIdle(wave))
        continue;
      const POp &loop = program.ops[wave.retraceOp];
      spinners.push_back(prefix() + program.kernelName + " workgroup (" +
                         std::to_string(wg->id[0]) + "," +
                         std::to_string(wg->id[1]) + "," +
                         std::to_string(wg->id[2]) + ") wave " +
                         std::to_string(wave.id) + " at " +
                         describeLocation(loop.op) + " (" +
                         describeOpName(loop.op) + ")");
      break;
    }
  }
  if (next < total) {
    const int64_t waiting = total - next;
    notes.push_back(prefix() + std::to_string(waiting) + " workgroup" +
                    (waiting == 1 ? "" : "s") + " of " + program.kernelName +
                    " not yet resident (at most " +
                    std::to_string(std::max(1u, launch.maxResidentWorkgroups)) +
                    " resident)");
  }
}

Stop Executor::runWave(Workgroup &wg, Wave &wave) {
  while (!wave.frames.empty()) {
    Frame &frame = wave.frames.back();
    const PBlock &blk = program.blocks[frame.block];
    const unsigned opIndex = blk.ops[frame.pos];
    const POp &p = program.ops[opIndex];
    if (launch.maxStepsPerWave && ++wave.steps > launch.maxStepsPerWave) {
      (void)fatal(p, "wave " + std::to_string(wave.id) + " exceeded " +
                         std::to_string(launch.maxStepsPerWave) +
                         " steps (runaway loop?)");
      return Stop::Error;
    }
    ++result.stats.waveOps;
    switch (p.kind) {
    case Kind::Return:
      wave.frames.clear();
      return Stop::Done;
    case Kind::Barrier:
      ++frame.pos;
      ++wave.barrierStops;
      return Stop::Barrier;
    case Kind::Sleep:
      ++frame.pos;
      return Stop::Yield;
    case Kind::Yield:
      if (frame.kind == FrameKind::WhileAfter) {
        // An scf.while iteration boundary: give the scheduler its turn back.
        backEdge(wave, p);
        return Stop::Yield;
      }
      if (failed(finishRegion(wave, p)))
        return Stop::Error;
      continue;
    case Kind::Condition:
      if (failed(finishBefore(wave, p)))
        return Stop::Error;
      continue;
    case Kind::While:
    case Kind::If:
    case Kind::For: {
      // Entering a region pushes a frame, which may move `frame`.
      const uint64_t mask = frame.mask;
      ++frame.pos;
      LogicalResult entered = p.kind == Kind::While ? enterWhile(wave, opIndex, mask)
                              : p.kind == Kind::If  ? enterIf(wave, opIndex, mask)
                                                    : enterFor(wave, opIndex, mask);
      if (failed(entered))
        return Stop::Error;
      continue;
    }
    default:
      if (failed(execOp(wg, wave, p, frame.mask)))
        return Stop::Error;
      ++frame.pos;
    }
  }
  return Stop::Done;
}

bool Executor::runWorkgroupAlone(int64_t linearId) {
  next = linearId;
  total = linearId + 1;
  while (!finished()) {
    bool progress = false;
    if (failed(runRound(progress)))
      return false;
    if (!progress) {
      // Without scf.while or s.sleep a wave always gets further; keep the
      // guarantee of never hanging anyway.
      error = "emulator: " + prefix() + program.kernelName +
              ": a workgroup stopped making progress";
      return false;
    }
  }
  return true;
}

void Executor::mergeLines(const Executor &other) {
  auto merge = [](std::vector<std::vector<uint64_t>> &into,
                  const std::vector<std::vector<uint64_t>> &from) {
    if (into.size() < from.size())
      into.resize(from.size());
    for (size_t b = 0; b < from.size(); ++b) {
      if (from[b].empty())
        continue;
      if (into[b].empty())
        into[b].assign(from[b].size(), 0);
      for (size_t w = 0; w < from[b].size(); ++w)
        into[b][w] |= from[b][w];
    }
  };
  merge(linesRead, other.linesRead);
  merge(linesWritten, other.linesWritten);
}

namespace {

/// A kernel none of whose workgroups can wait on another: no scf.while, no
/// s.sleep (the only ways to spin) and no atomics (whose order between
/// workgroups is visible in results). Its workgroups may run in any order
/// and at once.
bool independentWorkgroups(const Program &program) {
  for (const POp &p : program.ops)
    if (p.kind == Kind::While || p.kind == Kind::Sleep ||
        p.kind == Kind::AtomicRmw)
      return false;
  return true;
}

unsigned threadCount(const LaunchConfig &launch) {
  if (launch.threads)
    return launch.threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

/// The parallel path of one launch: workgroups taken in id order by
/// `threads` workers, each running one workgroup alone at a time. Results
/// do not depend on the thread count: memory (no workgroup reads what
/// another writes without a race), stats (sums), the line bitmaps (ORed),
/// and the findings, kept per workgroup and merged in workgroup order (the
/// first `maxFindings` of that order). A hard error reports the lowest
/// failing workgroup's.
LogicalResult runIndependent(const LaunchInput &in, GlobalMemory &memory,
                             RunResult &result, std::string &error,
                             bool member) {
  uint64_t unusedWrites = 0;
  Executor main(*in.program, memory, *in.launch, in.label, unusedWrites,
                result, error);
  if (failed(main.prepare(in.args)))
    return failure();
  const LaunchConfig &launch = *in.launch;
  const int64_t total = launch.grid[0] * launch.grid[1] * launch.grid[2];
  const unsigned workers =
      unsigned(std::min<int64_t>(threadCount(launch), total));
  struct Worker {
    uint64_t writes = 0;
    RunResult result;
    std::string error;
    std::unique_ptr<Executor> executor;
  };
  std::vector<Worker> pool(workers);
  for (Worker &w : pool) {
    w.executor = std::make_unique<Executor>(*in.program, memory, launch,
                                            in.label, w.writes, w.result,
                                            w.error);
    if (failed(w.executor->prepare(in.args))) {
      error = w.error;
      return failure();
    }
  }
  std::vector<std::vector<Finding>> findings(static_cast<size_t>(total));
  std::vector<std::string> errors(static_cast<size_t>(total));
  std::atomic<int64_t> nextGroup{0};
  std::atomic<int64_t> firstFailure{total};
  auto work = [&](Worker &w) {
    for (;;) {
      const int64_t id = nextGroup.fetch_add(1);
      if (id >= total || id > firstFailure.load())
        return;
      const bool done = w.executor->runWorkgroupAlone(id);
      if (member)
        peerProgressed();
      if (!done) {
        errors[size_t(id)] = w.error;
        int64_t seen = firstFailure.load();
        while (id < seen && !firstFailure.compare_exchange_weak(seen, id)) {
        }
        return;
      }
      findings[size_t(id)] = std::move(w.result.findings);
      w.result.findings.clear();
    }
  };
  if (workers <= 1) {
    work(pool[0]);
  } else {
    std::vector<std::thread> threads;
    for (unsigned t = 1; t < workers; ++t)
      threads.emplace_back(work, std::ref(pool[t]));
    work(pool[0]);
    for (std::thread &t : threads)
      t.join();
  }
  if (firstFailure.load() < total) {
    error = errors[size_t(firstFailure.load())];
    return failure();
  }
  for (Worker &w : pool) {
    accumulate(result.stats, w.result.stats);
    for (size_t k = 0; k < result.findingCounts.size(); ++k)
      result.findingCounts[k] += w.result.findingCounts[k];
    main.mergeLines(*w.executor);
  }
  for (auto &group : findings)
    for (Finding &finding : group)
      if (result.findings.size() < launch.maxFindings)
        result.findings.push_back(std::move(finding));
  main.finishCounters();
  return success();
}

/// How a stalled run over external buffers waits for its peer processes:
/// it polls with a growing sleep (50 us doubling to 10 ms) while some other
/// member of its PeerGroup advances, ends with an error naming a member
/// whose process is gone, and is a deadlock once no member advanced for
/// PeerGroup::timeoutSeconds(), or at once when it has no live peer at all
/// (then nothing outside the run can write its memory).
class PeerWait {
public:
  enum class Verdict { Wait, Deadlock, PeerGone };

  /// The run made progress: the next stall starts afresh.
  void reset() {
    stalled = false;
    sleep = std::chrono::microseconds(0);
  }

  /// A round without progress. `note` says why a verdict other than Wait
  /// was reached.
  Verdict poll(std::string &note) {
    const auto now = std::chrono::steady_clock::now();
    const std::vector<PeerInfo> peers = peerStates();
    for (const PeerInfo &peer : peers)
      if (!peer.alive) {
        note = "peer process " + std::to_string(peer.pid) +
               " ended while this run waits on memory it shares (the "
               "process died or was killed without leaving its group)";
        return Verdict::PeerGone;
      }
    if (peers.empty()) {
      note = "no other process shares this run's memory";
      return Verdict::Deadlock;
    }
    if (!stalled || peers != seen) {
      stalled = true;
      since = now;
      seen = peers;
    }
    const double timeout = PeerGroup::timeoutSeconds();
    const double waited = std::chrono::duration<double>(now - since).count();
    if (waited >= timeout) {
      note = "no peer process advanced for " + formatSeconds(waited) +
             " (MOEC_EMULATED_PEER_TIMEOUT " + formatSeconds(timeout) + "):";
      for (const PeerInfo &peer : peers)
        note += " process " + std::to_string(peer.pid) + " (" +
                std::to_string(peer.running) + " run" +
                (peer.running == 1 ? "" : "s") + " under way)";
      return Verdict::Deadlock;
    }
    sleep = std::min<std::chrono::microseconds>(
        std::max<std::chrono::microseconds>(sleep * 2,
                                            std::chrono::microseconds(50)),
        std::chrono::milliseconds(10));
    std::this_thread::sleep_for(sleep);
    return Verdict::Wait;
  }

private:
  static std::string formatSeconds(double seconds) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3g s", seconds);
    return text;
  }

  bool stalled = false;
  std::chrono::steady_clock::time_point since;
  std::vector<PeerInfo> seen;
  std::chrono::microseconds sleep{0};
};

} // namespace

FailureOr<RunResult> execute(llvm::ArrayRef<LaunchInput> launches,
                             GlobalMemory &memory, std::string &error) {
  const auto start = std::chrono::steady_clock::now();
  // In a process that shares memory with others, every run counts in its
  // PeerGroup slots while it lasts and bumps its progress counter as it
  // advances, so that a peer waiting on this process sees it working.
  const bool member = peerMember();
  struct RunningSlot {
    bool on;
    explicit RunningSlot(bool on) : on(on) {
      if (on)
        peerRunning(+1);
    }
    ~RunningSlot() {
      if (on)
        peerRunning(-1);
    }
  } runningSlot(member);
  // Kernels whose workgroups cannot wait on each other run launch after
  // launch, workgroups spread over threads; anything that may spin keeps
  // the cooperative scheduler below.
  if (std::all_of(launches.begin(), launches.end(),
                  [](const LaunchInput &in) {
                    return independentWorkgroups(*in.program);
                  })) {
    RunResult total;
    for (const LaunchInput &in : launches) {
      RunResult one;
      if (failed(runIndependent(in, memory, one, error, member)))
        return failure();
      accumulate(total.stats, one.stats);
      total.launchStats.push_back(one.stats);
      for (size_t k = 0; k < total.findingCounts.size(); ++k)
        total.findingCounts[k] += one.findingCounts[k];
      for (Finding &finding : one.findings)
        total.findings.push_back(std::move(finding));
    }
    total.stats.seconds = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count();
    return total;
  }
  uint64_t writes = 0;
  std::vector<RunResult> results(launches.size());
  std::vector<std::unique_ptr<Executor>> executors;
  executors.reserve(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const LaunchInput &in = launches[i];
    executors.push_back(std::make_unique<Executor>(
        *in.program, memory, *in.launch, in.label, writes, results[i], error));
    if (failed(executors.back()->prepare(in.args)))
      return failure();
  }
  // External buffers: another process may write what a wave waits on
  // (docs/emulator.md, "Ranks in separate processes").
  bool external = false;
  for (const auto &executor : executors)
    external |= executor->bindsExternal();
  PeerWait peerWait;
  // Rounds over all launches until every grid has finished. A round with
  // no progress and no memory write leaves every live wave retracing a
  // spin or waiting at a barrier only such waves could release: nothing in
  // this run can ever change what they wait on. Over external buffers a
  // peer process still may: the waves poll (they re-read memory every
  // round) until PeerWait gives up.
  for (;;) {
    bool live = false;
    for (const auto &executor : executors)
      live |= !executor->finished();
    if (!live)
      break;
    bool progress = false;
    const uint64_t writesBefore = writes;
    for (auto &executor : executors)
      if (!executor->finished() && failed(executor->runRound(progress)))
        return failure();
    if (progress || writes != writesBefore) {
      if (member)
        peerProgressed();
      if (external)
        peerWait.reset();
      continue;
    }
    std::string peerNote;
    if (external) {
      const PeerWait::Verdict verdict = peerWait.poll(peerNote);
      if (verdict == PeerWait::Verdict::Wait)
        continue;
      if (verdict == PeerWait::Verdict::PeerGone) {
        error = "emulator: " + peerNote;
        return failure();
      }
    }
    std::vector<std::string> spinners, notes;
    for (const auto &executor : executors)
      executor->describeStall(spinners, notes);
    if (spinners.empty()) // not expected: a stalled round has a spinner
      spinners.push_back("no wave can proceed");
    const size_t shown = std::min<size_t>(spinners.size(), 4);
    error = "emulator: deadlock: " + std::to_string(spinners.size()) +
            (spinners.size() == 1 ? " workgroup spins" : " workgroups spin") +
            " and nothing can change what they wait on: ";
    for (size_t i = 0; i < shown; ++i)
      error += (i ? "; " : "") + spinners[i];
    if (spinners.size() > shown)
      error += "; and " + std::to_string(spinners.size() - shown) + " more";
    for (const std::string &note : notes)
      error += "; " + note;
    if (!peerNote.empty())
      error += "; " + peerNote;
    return failure();
  }

  RunResult total;
  for (auto &executor : executors)
    executor->finishCounters();
  for (RunResult &result : results) {
    accumulate(total.stats, result.stats);
    total.launchStats.push_back(result.stats);
    for (size_t k = 0; k < total.findingCounts.size(); ++k)
      total.findingCounts[k] += result.findingCounts[k];
    for (Finding &finding : result.findings)
      total.findings.push_back(std::move(finding));
  }
  total.stats.seconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  return total;
}
} // namespace moec::emu::detail

namespace moec::emu {

void accumulate(RunStats &sum, const RunStats &one) {
  sum.workgroups += one.workgroups;
  sum.waves += one.waves;
  sum.waveOps += one.waveOps;
  sum.mfmas += one.mfmas;
  sum.barriers += one.barriers;
  sum.yields += one.yields;
  sum.rawLoadsOutOfRange += one.rawLoadsOutOfRange;
  sum.rawStoresDropped += one.rawStoresDropped;
  sum.ldsDmaOps += one.ldsDmaOps;
  sum.globalBytesRead += one.globalBytesRead;
  sum.globalBytesWritten += one.globalBytesWritten;
  sum.globalLinesRead += one.globalLinesRead;
  sum.globalLinesWritten += one.globalLinesWritten;
  sum.ldsBytesRead += one.ldsBytesRead;
  sum.ldsBytesWritten += one.ldsBytesWritten;
  sum.ldsBankConflicts += one.ldsBankConflicts;
  sum.scaledMfmas += one.scaledMfmas;
  sum.otherInstructions += one.otherInstructions;
  sum.seconds += one.seconds;
}

void addKernelStats(KernelStatsList &list, const std::string &name,
                    const RunStats &one) {
  for (auto &entry : list)
    if (entry.first == name) {
      accumulate(entry.second, one);
      return;
    }
  list.emplace_back(name, one);
}

std::string formatCounters(const RunStats &s) {
  const std::pair<const char *, uint64_t> fields[] = {
      {"globalBytesRead", s.globalBytesRead},
      {"globalBytesWritten", s.globalBytesWritten},
      {"globalLinesRead", s.globalLinesRead},
      {"globalLinesWritten", s.globalLinesWritten},
      {"ldsBytesRead", s.ldsBytesRead},
      {"ldsBytesWritten", s.ldsBytesWritten},
      {"ldsBankConflicts", s.ldsBankConflicts},
      {"scaledMfmas", s.scaledMfmas},
      {"otherInstructions", s.otherInstructions}};
  std::string line;
  for (const auto &[name, value] : fields)
    line += (line.empty() ? "" : " ") + std::string(name) + " " +
            std::to_string(value);
  return line;
}

} // namespace moec::emu
