// Memory that a step reads next, asked for while a matmul keeps the cores busy: a decode step's attention reads
// every running sequence's keys and values from memory at the memory's pace, while the layer before it spends
// its time in the MLP's matmuls, whose weights and activations sit in cache. Given an Ahead, a matmul's kernels
// ask for its lines (a software prefetch) a few at a time in proportion to the multiply-adds they have done, so
// the lines arrive spread over the matmul and wait in the caches (L2, then L3 as they are pushed out of L2) for
// the attention that reads them. Hints only: no value changes.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace tl {

// Ranges of memory to ask for, each `lines` cache lines from its start, and how many lines to ask per
// multiply-add of the matmuls given it. Owned by the caller, alive until those matmuls return.
struct Ahead {
    const char* const* starts = nullptr;
    int64_t num = 0, lines = 0;
    double lines_per_mac = 0.0;
    std::atomic<int64_t> next{0};  // the first line no thread has claimed, counted over all ranges
};

// One thread's share of an Ahead, for one chunk of a matmul: lines claimed CLAIM at a time (one atomic add per
// claim, not per line), asked for as credit for multiply-adds comes in. Lines still claimed when the chunk ends
// go unasked (at most CLAIM a chunk, a few chunks a matmul).
class AheadCursor {
  public:
    explicit AheadCursor(Ahead* a) : a_(a && a->num > 0 ? a : nullptr) {}

    // Credit for macs multiply-adds done, its lines asked for by a later take() or ask().
    void earn(int64_t macs) {
        if (a_) credit_ += macs * a_->lines_per_mac;
    }

    // The lines that macs earn (with what earlier calls left), up to the end of a range: the first at *p, their
    // number returned, for the caller to ask for one at a time among its own work (LineSide).
    int64_t take(int64_t macs, const char** p) {
        earn(macs);
        const int64_t n = a_ ? (int64_t)credit_ : 0;
        if (n == 0) return 0;
        if (at_ == end_ && !claim()) {
            a_ = nullptr;
            return 0;
        }
        const int64_t run = std::min(n, std::min(end_ - at_, a_->lines - offset_));
        *p = a_->starts[range_] + offset_ * 64;
        credit_ -= (double)run;
        at_ += run;
        if ((offset_ += run) == a_->lines) ++range_, offset_ = 0;
        return run;
    }

    // The lines that macs earn (with what earlier calls left), asked for now, in a burst.
    void ask(int64_t macs) {
        const char* p;
        for (int64_t n = take(macs, &p); n > 0; n = take(0, &p))
            for (int64_t l = 0; l < n; ++l) __builtin_prefetch(p + l * 64, 0, 1);
    }

  private:
    static constexpr int64_t CLAIM = 512;  // lines (32 KB): the atomic's line bounced per claim, not per line
    Ahead* a_;
    double credit_ = 0.0;
    int64_t at_ = 0, end_ = 0, range_ = 0, offset_ = 0;  // claimed lines [at_, end_): range_'s line offset_ first

    bool claim() {
        at_ = a_->next.fetch_add(CLAIM, std::memory_order_relaxed);
        end_ = std::min(at_ + CLAIM, a_->num * a_->lines);
        range_ = at_ / a_->lines;
        offset_ = at_ % a_->lines;
        return at_ < end_;
    }
};

// A run of lines asked for one per unit() (a tile's side job, tile.h).
struct LineSide {
    const char* p;
    int64_t n;
    void unit() {
        if (n > 0) {
            __builtin_prefetch(p, 0, 1);  // read, into the outer caches (prefetcht2 on x86)
            p += 64;
            --n;
        }
    }
};

// An Ahead over a region in ranges of 4 KB (for tests: asks change no value).
struct RegionAhead {
    std::vector<const char*> starts;
    Ahead ahead;
    RegionAhead(const char* region, int64_t bytes, double lines_per_mac) {
        for (int64_t at = 0; at + 4096 <= bytes; at += 4096) starts.push_back(region + at);
        ahead.starts = starts.data();
        ahead.num = (int64_t)starts.size();
        ahead.lines = 64;
        ahead.lines_per_mac = lines_per_mac;
    }
};

}  // namespace tl
