// A small thread pool whose caller never waits for a helper to show up: chunks of a job are claimed from one
// atomic ticket, the caller claims too, and it waits only for chunks a helper has actually claimed. On a busy
// machine (more runnable threads than cores) a descheduled helper therefore costs nothing, where an OpenMP
// barrier would wait a whole time slice for it.
//
// ticket = generation << 32 | next chunk. The caller closes a job (index CLOSED) before rewriting the job's
// fields, so a helper whose compare-and-swap on the ticket succeeds read fields of that very job.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TL_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define TL_PAUSE() asm volatile("yield")
#else
#define TL_PAUSE() std::this_thread::yield()
#endif

namespace tl {

// Helpers live as long as the process (the pool is never destroyed, so exit never waits on them).
class Pool {
  public:
    using Fn = void (*)(void* ctx, int64_t chunk);

    // Run fn(ctx, c) for c in [0, num_chunks) on the caller and up to threads - 1 helpers.
    void run(Fn fn, void* ctx, int64_t num_chunks, int threads) {
        if (threads <= 1 || num_chunks <= 1) {
            for (int64_t c = 0; c < num_chunks; ++c) fn(ctx, c);
            return;
        }
        std::lock_guard<std::mutex> one_job(run_mu_);  // jobs from several caller threads run one at a time
        grow(threads - 1);
        const uint64_t gen = (ticket_.load() >> 32) + 1;
        fn_.store(fn, std::memory_order_relaxed);
        ctx_.store(ctx, std::memory_order_relaxed);
        num_chunks_.store(num_chunks, std::memory_order_relaxed);
        num_helpers_.store(threads - 1, std::memory_order_relaxed);
        done_.store(0);
        ticket_.store(gen << 32);  // publish: helpers may claim from here on
        if (sleepers_.load() > 0) {
            std::lock_guard<std::mutex> lock(mu_);
            cv_.notify_all();
        }
        int64_t mine = work(gen, -1);
        while (done_.load(std::memory_order_acquire) + mine < num_chunks) TL_PAUSE();
        ticket_.store(gen << 32 | CLOSED);  // close before the next job rewrites the fields
    }

  private:
    static constexpr uint64_t CLOSED = 0xFFFFFFFFu;
    static constexpr auto SPIN = std::chrono::microseconds(30);  // then sleep, leaving the cores to torch

    // Claim and run chunks of job `gen`; returns how many this thread ran (helpers count theirs in done_).
    int64_t work(uint64_t gen, int helper) {
        int64_t ran = 0;
        for (;;) {
            uint64_t t = ticket_.load(std::memory_order_acquire);
            if ((t >> 32) != gen || (t & CLOSED) == CLOSED) break;
            if (helper >= num_helpers_.load(std::memory_order_relaxed)) break;
            const Fn fn = fn_.load(std::memory_order_relaxed);
            void* ctx = ctx_.load(std::memory_order_relaxed);
            const int64_t n = num_chunks_.load(std::memory_order_relaxed);
            if ((int64_t)(t & CLOSED) >= n) break;
            if (!ticket_.compare_exchange_weak(t, t + 1)) continue;
            fn(ctx, (int64_t)(t & CLOSED));
            ++ran;
            if (helper >= 0) done_.fetch_add(1, std::memory_order_release);
        }
        return ran;
    }

    void grow(int helpers) {
        while ((int)helpers_.size() < helpers) {
            const int id = (int)helpers_.size();
            helpers_.emplace_back([this, id] { helper_loop(id); });
        }
    }

    void helper_loop(int id) {
        uint64_t seen = 0;
        for (;;) {
            auto start = std::chrono::steady_clock::now();
            uint64_t t;
            for (int i = 0;; ++i) {
                t = ticket_.load(std::memory_order_acquire);
                if ((t >> 32) != seen) break;
                TL_PAUSE();
                if ((i & 255) == 255 && std::chrono::steady_clock::now() - start > SPIN) {
                    std::unique_lock<std::mutex> lock(mu_);
                    sleepers_.fetch_add(1);
                    cv_.wait(lock, [&] { return (ticket_.load() >> 32) != seen; });
                    sleepers_.fetch_sub(1);
                    start = std::chrono::steady_clock::now();
                }
            }
            seen = t >> 32;
            work(seen, id);
        }
    }

    std::atomic<uint64_t> ticket_{CLOSED};
    std::atomic<int64_t> done_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<Fn> fn_{nullptr};
    std::atomic<void*> ctx_{nullptr};
    std::atomic<int64_t> num_chunks_{0};
    std::atomic<int> num_helpers_{0};
    std::vector<std::thread> helpers_;
    std::mutex mu_, run_mu_;
    std::condition_variable cv_;
};

// A job's units of work cut into chunks, claimed in order: first one chunk per thread holding four fifths of
// its share, then the last fifth in 2 x threads small chunks, so that a thread that runs slow or starts late
// costs little. Each chunk is a new stream of weights for the hardware prefetcher to pick up; over a decode
// step's matmuls this cut ran faster than four equal chunks per thread, and level with one chunk per thread.
struct Chunks {
    int64_t start[64];  // at most 3 x 16 chunks (16 threads or more cut as 16), then the end
    int64_t count = 0;

    Chunks(int64_t units, int threads) {
        threads = std::max(1, std::min(threads, 16));
        const int64_t first = units * 4 / 5 / threads, rest = (units - first * threads + 2 * threads - 1) / (2 * threads);
        for (int64_t at = 0; at < units; ++count) {
            start[count] = at;
            at += threads == 1 ? units : std::min(units - at, std::max<int64_t>(1, count < threads ? first : rest));
        }
        start[count] = units;
    }
};

// The process's one pool (qmatmul.cpp), shared by every kernel of the library.
Pool& pool();

}  // namespace tl
