// The paged KV pool and passes over many sequences: blocks under churn (no
// leak, no overwrite), per-sequence commit / compaction / truncation, and each
// sequence's logits in a shared pass equal to its pass alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "src/engine/kv_cache.h"
#include "src/engine/kv_pool.h"
#include "src/engine/transformer.h"
#include "src/model/model_desc.h"
#include "src/util/error.h"
#include "tests/util/test_model.h"
#include "tests/util/tiny_gguf.h"

using namespace redwood;

namespace {

// ---- the block allocator ----

// A pool on the CPU backend whose rows the test writes directly: every row
// written gets a fresh stamp, element e of layer l's K row holding
// stamp + e / 64 + l * 1e6 (V: negated), so a row moved, lost or overwritten
// shows.
struct Stamped {
  static constexpr int kLayers = 2, kDim = 4;
  std::unique_ptr<Backend> be = make_cpu_backend();
  KvPool pool;
  float next = 1;
  std::map<int, std::vector<float>> want;  // per live sequence: the stamp of each committed position
  Stamped(int blocks, int block_rows, int max_rows) : pool(*be, kLayers, kDim, blocks, block_rows, max_rows) {}

  float elem(float stamp, int l, int e, bool v) const {
    const float x = stamp + e / 64.0f + l * 1e6f;
    return v ? -x : x;
  }
  // Appends `count` pending rows to s (a chain after its pending block); their stamps.
  std::vector<float> append(int s, int count) {
    const int first = pool.committed(s) + pool.pending(s);
    pool.reserve(s, first + count);
    std::vector<float> stamps;
    std::vector<int32_t> parents, positions;
    for (int i = 0; i < count; ++i) {
      const float st = next++;
      stamps.push_back(st);
      parents.push_back(pool.pending(s) + i - 1);
      positions.push_back(first + i);
      const int64_t r = pool.row(s, first + i);
      for (int l = 0; l < kLayers; ++l)
        for (int e = 0; e < kDim; ++e) {
          static_cast<float*>(pool.k(l))[r * kDim + e] = elem(st, l, e, false);
          static_cast<float*>(pool.v(l))[r * kDim + e] = elem(st, l, e, true);
        }
    }
    pool.append_pending(s, parents, positions);
    return stamps;
  }
  // Every live sequence's committed rows hold their stamps; the blocks add up.
  void check(const std::string& when) {
    int owned = 0;
    for (const auto& [s, stamps] : want) {
      ASSERT_EQ(pool.committed(s), static_cast<int>(stamps.size())) << when;
      const int rows = pool.committed(s) + pool.pending(s);
      owned += (rows + pool.block_rows() - 1) / pool.block_rows();
      for (int r = 0; r < pool.committed(s); ++r) {
        const int64_t at = pool.row(s, r);
        for (int l = 0; l < kLayers; ++l)
          for (int e = 0; e < kDim; ++e) {
            ASSERT_EQ(static_cast<float*>(pool.k(l))[at * kDim + e], elem(stamps[r], l, e, false))
                << when << ": sequence " << s << " position " << r;
            ASSERT_EQ(static_cast<float*>(pool.v(l))[at * kDim + e], elem(stamps[r], l, e, true))
                << when << ": sequence " << s << " position " << r;
          }
      }
    }
    ASSERT_EQ(owned + pool.free_blocks(), pool.n_blocks()) << when << ": blocks leaked or shared";
    // No block is in two tables.
    std::vector<int> users(pool.n_blocks(), 0);
    for (const auto& [s, stamps] : want)
      for (int b = 0; b < pool.table_stride() && pool.table(s)[b] >= 0; ++b) ++users[pool.table(s)[b]];
    for (int b = 0; b < pool.n_blocks(); ++b) ASSERT_LE(users[b], 1) << when << ": block " << b;
  }
};

}  // namespace

// Sequences of very different lengths (1 to 300 positions) grow in chunks,
// commit prefixes and tree paths, discard and truncate, and finish out of
// order while new ones take their blocks: every surviving sequence's rows stay
// as written, and at the end the whole pool is free again.
TEST(KvPool, ChurnLeaksNothingAndOverwritesNothing) {
  Stamped t(/*blocks=*/96, /*block_rows=*/4, /*max_rows=*/320);
  std::mt19937 rng(44);
  std::map<int, int> target;  // live sequence -> the length at which it finishes
  int finished = 0, refused = 0;
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (target.empty() || (op == 0 && target.size() < 12)) {
      const int s = t.pool.add_sequence();
      ASSERT_EQ(t.want.count(s), 0u);
      t.want[s] = {};
      target[s] = rng() % 4 == 0 ? 200 + static_cast<int>(rng() % 100) : 1 + static_cast<int>(rng() % 30);
      continue;
    }
    auto it = target.begin();
    std::advance(it, rng() % target.size());
    const int s = it->first;
    std::vector<float>& want = t.want[s];
    const int chunk = 1 + static_cast<int>(rng() % 9);
    const int free_before = t.pool.free_blocks();
    std::vector<float> stamps;
    try {
      stamps = t.append(s, chunk);
    } catch (const Error&) {
      // Out of blocks: nothing taken; the longest-lived sequence finishes early.
      ++refused;
      ASSERT_EQ(t.pool.free_blocks(), free_before);
      ASSERT_EQ(t.pool.pending(s), 0);
      const int victim = target.begin()->first;
      t.pool.free_sequence(victim);
      t.want.erase(victim);
      target.erase(victim);
      t.check("after freeing " + std::to_string(victim));
      continue;
    }
    switch (rng() % 4) {
      case 0:
        t.pool.discard(s);
        break;
      case 1: {  // a tree path: some ascending rows of the block
        std::vector<int32_t> rows;
        for (int r = 0; r < chunk; ++r)
          if (rng() % 2) rows.push_back(r);
        t.pool.commit_path(s, rows);
        for (int32_t r : rows) want.push_back(stamps[r]);
        break;
      }
      case 2:
        if (!want.empty() && rng() % 3 == 0) {
          t.pool.discard(s);
          const int n = static_cast<int>(rng() % want.size());
          t.pool.truncate(s, n);
          want.resize(n);
          break;
        }
        [[fallthrough]];
      default: {
        const int n = static_cast<int>(rng() % (chunk + 1));
        t.pool.commit_prefix(s, n);
        want.insert(want.end(), stamps.begin(), stamps.begin() + n);
      }
    }
    if (static_cast<int>(want.size()) >= target[s]) {
      t.pool.free_sequence(s);
      EXPECT_FALSE(t.pool.live(s));
      t.want.erase(s);
      target.erase(s);
      ++finished;
    }
    t.check("step " + std::to_string(step));
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(finished, 50);
  RecordProperty("finished", finished), RecordProperty("refused", refused);
  EXPECT_GT(refused, 0) << "the pool never filled: the test did not reach the out-of-blocks path";
  for (const auto& [s, n] : target) t.pool.free_sequence(s);
  EXPECT_EQ(t.pool.free_blocks(), t.pool.n_blocks());
  EXPECT_EQ(t.pool.live_sequences(), 0);
}

TEST(KvPool, RefusesBadUseWithOneLineErrors) {
  auto be = make_cpu_backend();
  EXPECT_THROW({ KvPool p(*be, 2, 4, 0, 4, 16); }, Error);
  EXPECT_THROW({ KvPool p(*be, 2, 4, 4, 4, 16, DType::Q8_0); }, Error);
  KvPool pool(*be, 2, 4, /*blocks=*/3, /*block_rows=*/4, /*max_rows=*/10);
  EXPECT_EQ(pool.bytes(), 2ull * 2 * 3 * 4 * 4 * sizeof(float));
  EXPECT_EQ(pool.bytes(), KvPool::bytes_for(2, 4, 3, 4, DType::F32));
  EXPECT_EQ(pool.table_stride(), 3);
  EXPECT_THROW(pool.committed(0), Error);  // no sequence yet
  const int a = pool.add_sequence(), b = pool.add_sequence();
  EXPECT_NE(a, b);
  EXPECT_THROW(pool.reserve(a, 11), Error);  // past max_rows
  pool.reserve(a, 9);                        // three blocks: all of them
  EXPECT_EQ(pool.free_blocks(), 0);
  EXPECT_THROW(pool.reserve(b, 1), Error);
  EXPECT_THROW(pool.commit_prefix(a, 1), Error);  // nothing pending
  const std::vector<int32_t> chain = {-1, 0, 1}, at = {0, 1, 2};
  EXPECT_THROW(pool.append_pending(a, chain, std::vector<int32_t>{0, 1}), Error);  // positions of every row
  pool.append_pending(a, chain, at);
  EXPECT_EQ(pool.block_positions(a), at);
  EXPECT_THROW(pool.commit_path(a, std::vector<int32_t>{1, 0}), Error);
  EXPECT_THROW(pool.commit_path(a, std::vector<int32_t>{3}), Error);
  pool.commit_prefix(a, 2);  // keeps one block: two rows
  EXPECT_EQ(pool.free_blocks(), 2);
  EXPECT_THROW(pool.truncate(a, 3), Error);
  pool.free_sequence(a);
  EXPECT_THROW(pool.free_sequence(a), Error);
  EXPECT_EQ(pool.add_sequence(), a);  // ids are reused
  EXPECT_EQ(pool.free_blocks(), 3);
}

// ---- passes over many sequences ----

namespace {

double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// One sequence's part of a pass: tokens with positions and parents relative to
// its block, plus how the solo run commits afterwards.
struct Part {
  int seq;  // index into the test's sequences
  std::vector<int32_t> tokens, parents;
  std::vector<int32_t> keep;  // commit_path rows (prefix == -1)
  int prefix = -1;            // commit_prefix(prefix); -2: commit nothing (the block grows in the next pass)
};

// The sequences' passes, solo (each its own KvCache, one pass per part) and
// shared (one KvPool pass per step over all parts, tokens interleaved).
struct Scenario {
  int n_seqs = 0;
  std::vector<std::vector<Part>> steps;
};

Scenario mixed_scenario(int vocab) {
  std::mt19937 rng(7);
  auto toks = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
    return t;
  };
  auto chain = [](int n) {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = i - 1;
    return p;
  };
  Scenario s;
  s.n_seqs = 4;
  // Step 1: three prompts of different lengths, prefilled together.
  s.steps.push_back(
      {{0, toks(12), chain(12), {}, 12}, {1, toks(20), chain(20), {}, 20}, {2, toks(9), chain(9), {}, 9}});
  // Step 2: 0 decodes one token, 1 verifies a tree (keeps a path), 2 prefills
  // another chunk, 3 arrives with its prompt.
  const std::vector<int32_t> tree = {-1, 0, 0, 1, 1, 3, 2, 6, 6, 0};
  s.steps.push_back({{0, toks(1), {-1}, {}, 1},
                     {1, toks(10), tree, {0, 1, 3, 5}, -1},
                     {2, toks(11), chain(11), {}, 11},
                     {3, toks(15), chain(15), {}, 15}});
  // Step 3: every sequence decodes one token, but 2 starts a draft tree.
  s.steps.push_back({{0, toks(1), {-1}, {}, 1},
                     {1, toks(1), {-1}, {}, 1},
                     {2, toks(3), {-1, 0, 0}, {}, -2},
                     {3, toks(1), {-1}, {}, 1}});
  // Step 4: 2's tree grows a level over its pending rows (parents index them)
  // and keeps a path through both passes; 0 and 3 decode.
  s.steps.push_back({{0, toks(1), {-1}, {}, 1}, {2, toks(3), {1, 2, 3}, {0, 2, 4}, -1}, {3, toks(1), {-1}, {}, 1}});
  // Step 5: every sequence decodes one token.
  s.steps.push_back(
      {{0, toks(1), {-1}, {}, 1}, {1, toks(1), {-1}, {}, 1}, {2, toks(1), {-1}, {}, 1}, {3, toks(1), {-1}, {}, 1}});
  return s;
}

// Positions from parents: committed + depth in the block, whose first rows
// (pending_pos: their positions) came from earlier passes.
std::vector<int32_t> positions_of(const std::vector<int32_t>& parents, int committed,
                                  const std::vector<int32_t>& pending_pos = {}) {
  std::vector<int32_t> pos = pending_pos;
  for (int32_t p : parents) pos.push_back(p < 0 ? committed : pos[p] + 1);
  return std::vector<int32_t>(pos.begin() + pending_pos.size(), pos.end());
}

struct Logits {
  // [step][seq] -> rows of the part's tokens, vocab floats each.
  std::vector<std::vector<std::vector<float>>> rows;
};

Logits run_solo(testutil::TestModel& m, const Scenario& sc) {
  Logits out;
  std::vector<KvCache> kv;
  std::vector<std::vector<int32_t>> pending_pos(sc.n_seqs);
  for (int s = 0; s < sc.n_seqs; ++s) kv.push_back(m.tf->make_cache(128));
  for (const auto& step : sc.steps) {
    out.rows.emplace_back(sc.n_seqs);
    for (const Part& p : step) {
      KvCache& c = kv[p.seq];
      const auto pos = positions_of(p.parents, c.committed(), pending_pos[p.seq]);
      pending_pos[p.seq].insert(pending_pos[p.seq].end(), pos.begin(), pos.end());
      auto& lg = out.rows.back()[p.seq];
      lg.resize(p.tokens.size() * m.V());
      m.tf->forward(Batch{p.tokens, pos, p.parents}, c, lg, LogitsRows::kAll);
      if (p.prefix == -2) continue;
      pending_pos[p.seq].clear();
      if (p.prefix >= 0)
        c.commit_prefix(p.prefix);
      else
        c.commit_path(p.keep);
    }
  }
  return out;
}

// wrong_seq >= 0: the last token of the last step is given to that sequence
// instead (a token attending to another sequence's history).
Logits run_shared(testutil::TestModel& m, const Scenario& sc, int block_rows, int wrong_seq = -1) {
  KvPool pool(*m.be, m.desc.hp.n_layers, m.desc.hp.n_kv_heads * m.desc.hp.head_dim, 64, block_rows, 128);
  // Ids in the pool differ from the test's indices (and one is freed first).
  const int spare = pool.add_sequence();
  std::vector<int> id;
  for (int s = 0; s < sc.n_seqs; ++s) id.push_back(pool.add_sequence());
  pool.free_sequence(spare);
  Logits out;
  std::vector<std::vector<int32_t>> pending_pos(sc.n_seqs);
  for (size_t st = 0; st < sc.steps.size(); ++st) {
    const auto& step = sc.steps[st];
    // Interleave: round robin over the parts.
    std::vector<int32_t> seqs, toks, pos, par, owner, row;
    std::vector<std::vector<int32_t>> part_pos;
    for (const Part& p : step) {
      part_pos.push_back(positions_of(p.parents, pool.committed(id[p.seq]), pending_pos[p.seq]));
      pending_pos[p.seq].insert(pending_pos[p.seq].end(), part_pos.back().begin(), part_pos.back().end());
    }
    for (size_t k = 0;; ++k) {
      bool any = false;
      for (size_t j = 0; j < step.size(); ++j) {
        const Part& p = step[j];
        if (k >= p.tokens.size()) continue;
        any = true;
        seqs.push_back(id[p.seq]);
        toks.push_back(p.tokens[k]);
        pos.push_back(part_pos[j][k]);
        par.push_back(p.parents[k]);
        owner.push_back(p.seq);
        row.push_back(static_cast<int32_t>(k));
      }
      if (!any) break;
    }
    if (wrong_seq >= 0 && st + 1 == sc.steps.size()) seqs.back() = id[wrong_seq];
    // Logits of every token, asked for in reverse order (the rows are gathered).
    std::vector<int32_t> want(toks.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int32_t>(want.size() - 1 - i);
    std::vector<float> lg(want.size() * m.V());
    m.tf->forward(SeqBatch{seqs, toks, pos, par}, pool, lg, want);
    out.rows.emplace_back(sc.n_seqs);
    for (const Part& p : step) out.rows.back()[p.seq].resize(p.tokens.size() * m.V());
    for (size_t r = 0; r < want.size(); ++r) {
      const int i = want[r];
      std::copy_n(lg.begin() + r * m.V(), m.V(), out.rows.back()[owner[i]].begin() + row[i] * m.V());
    }
    if (wrong_seq >= 0 && st + 1 == sc.steps.size()) {
      for (int s : id) pool.discard(s);
      break;
    }
    for (const Part& p : step) {
      if (p.prefix == -2) continue;
      pending_pos[p.seq].clear();
      if (p.prefix >= 0)
        pool.commit_prefix(id[p.seq], p.prefix);
      else
        pool.commit_path(id[p.seq], p.keep);
    }
  }
  for (int s : id) pool.free_sequence(s);
  EXPECT_EQ(pool.free_blocks(), pool.n_blocks());
  return out;
}

// Whether a token's outputs of every matrix of the model (layer 0's, the LM
// head) are the same bits in a pass of n tokens and one of N: probed on the
// model's own weights, since the CPU's GEMV kernels sum in orders that change
// with n (matmul.cpp's table).
bool same_bits(testutil::TestModel& m, int n, int N) {
  if (n == N) return true;
  // OpenBLAS (REDWOOD_ISA=scalar) blocks tokens by position: no probe of one
  // token position tells.
  if (cpu::kernel_isa() == cpu::Isa::scalar) return false;
  const LayerWeights& L = m.w->acquire(0);
  std::vector<WeightView> ws = {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down, m.w->globals().lm_head};
  m.w->release(0);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (const WeightView& w : ws) {
    std::vector<float> x(static_cast<size_t>(std::max(n, N)) * w.cols), a(n * w.rows), b(N * w.rows);
    for (float& v : x) v = nd(rng);
    cpu::matmul(w, x.data(), n, a.data());
    cpu::matmul(w, x.data(), N, b.data());
    if (!std::equal(a.begin(), a.begin() + w.rows, b.begin())) return false;
  }
  return true;
}

}  // namespace

class SharedPass : public ::testing::TestWithParam<DType> {
 protected:
  std::string path;
  void SetUp() override {
    path = ::testing::TempDir() + "kvpool_tiny_" + std::string(dtype_name(GetParam())) + ".gguf";
    testutil::TinyShape s;
    s.type = GetParam();
    s.tied = GetParam() == DType::Q4_1;
    testutil::write_tiny_llama(path, s);
  }
};

// Prompts of different lengths prefilled together, then a decode token, a
// tree (compacted to its accepted path) and a prefill chunk sharing a pass
// with a newly arrived prompt, then four decode tokens: each sequence's logits
// equal its own passes alone (a KvCache), bit for bit as long as every pass
// of the sequence computed a token's matmuls with the same bits at its solo
// size as at the shared size (the GEMM at any n > 8, gemv_plain at any n <= 8;
// the other GEMV kernels change summation order with n), else to fp32
// accuracy. A draft tree grows over two shared passes (its pending rows).
// Blocks of 4 rows (sequences cross many blocks) and of 64 (one block each).
// Negative control: a token given to another sequence breaks the equality.
TEST_P(SharedPass, EachSequenceEqualsItsPassesAlone) {
  testutil::TestModel m(path);
  const Scenario sc = mixed_scenario(m.V());
  const Logits solo = run_solo(m, sc);
  int exact = 0, close = 0;
  for (int block_rows : {4, 64}) {
    const Logits shared = run_shared(m, sc, block_rows);
    // A sequence once run through other kernels than alone holds other KV
    // rows from then on: later passes compare to fp32 accuracy only.
    std::vector<bool> diverged(sc.n_seqs, false);
    for (size_t st = 0; st < sc.steps.size(); ++st) {
      int N = 0;
      for (const Part& p : sc.steps[st]) N += static_cast<int>(p.tokens.size());
      for (const Part& p : sc.steps[st]) {
        const int n = static_cast<int>(p.tokens.size());
        const auto& a = shared.rows[st][p.seq];
        const auto& b = solo.rows[st][p.seq];
        const std::string what = std::string(dtype_name(GetParam())) + " blocks of " + std::to_string(block_rows) +
                                 ", step " + std::to_string(st) + ", sequence " + std::to_string(p.seq) + " (" +
                                 std::to_string(n) + " of " + std::to_string(N) + " tokens)";
        diverged[p.seq] = diverged[p.seq] || !same_bits(m, n, N);
        if (!diverged[p.seq]) {
          EXPECT_EQ(a, b) << what;
          ++exact;
        } else {
          EXPECT_LT(rel_err(a.data(), b.data(), a.size()), 2e-5) << what;
          ++close;
        }
      }
    }
  }
  // The parts of more than 8 tokens in the first two steps (the GEMM either
  // way) at least, per block size; F16 all of them on AVX2 (gemv_plain).
  if (cpu::kernel_isa() != cpu::Isa::scalar) {
    EXPECT_GE(exact, 12) << close << " parts compared to fp32 accuracy only";
  }
  RecordProperty("parts_bit_identical", exact), RecordProperty("parts_fp32_close", close);
  // The control: sequence 3's decode token read as sequence 0's.
  const Logits wrong = run_shared(m, sc, 4, /*wrong_seq=*/0);
  const auto& a = wrong.rows.back()[3];
  const auto& b = solo.rows.back()[3];
  EXPECT_GT(rel_err(a.data(), b.data(), a.size()), 1e-3);
}

// With batch-invariant matmuls (set_cpu_batch_invariant) every sequence's
// logits equal its passes alone bit for bit, decode tokens included.
TEST_P(SharedPass, BitIdenticalWithBatchInvariantMatmuls) {
  if (cpu::kernel_isa() == cpu::Isa::scalar) GTEST_SKIP() << "the OpenBLAS path (no AVX2) is not batch-invariant";
  struct Restore {
    ~Restore() { set_cpu_batch_invariant(false); }
  } restore;
  set_cpu_batch_invariant(true);
  testutil::TestModel m(path);
  const Scenario sc = mixed_scenario(m.V());
  const Logits solo = run_solo(m, sc);
  const Logits shared = run_shared(m, sc, 4);
  for (size_t st = 0; st < sc.steps.size(); ++st)
    for (const Part& p : sc.steps[st])
      EXPECT_EQ(shared.rows[st][p.seq], solo.rows[st][p.seq]) << "step " << st << ", sequence " << p.seq;
  const Logits wrong = run_shared(m, sc, 4, /*wrong_seq=*/0);
  EXPECT_NE(wrong.rows.back()[3], solo.rows.back()[3]);
}

INSTANTIATE_TEST_SUITE_P(Types, SharedPass, ::testing::Values(DType::F16, DType::Q8_0, DType::Q4_1),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// A pass over one sequence of a pool computes what the same pass over a
// KvCache does (the one-sequence case), and bad batches are refused before
// anything is taken from the pool.
TEST(SharedPassErrors, RefusedBeforeAnythingRuns) {
  const std::string path = ::testing::TempDir() + "kvpool_tiny_err.gguf";
  testutil::TinyShape shape;
  testutil::write_tiny_llama(path, shape);
  testutil::TestModel m(path);
  const int kv_dim = m.desc.hp.n_kv_heads * m.desc.hp.head_dim;
  KvPool pool(*m.be, m.desc.hp.n_layers, kv_dim, 4, 4, 12);
  const int s = pool.add_sequence();
  std::vector<float> lg(2 * m.V());
  const std::vector<int32_t> one = {s}, two = {s, s}, tok = {5}, toks = {5, 6}, pos = {0}, poss = {0, 1}, root = {-1},
                             chain = {-1, 0}, last = {0};
  EXPECT_THROW(m.tf->forward(SeqBatch{}, pool, lg, {}), Error);
  EXPECT_THROW(m.tf->forward(SeqBatch{{}, tok, pos, root}, pool, lg, {}), Error);  // lengths differ
  const std::vector<int32_t> ghost = {s + 7}, bad_tok = {m.V()}, bad_par = {0}, bad_pos = {-1}, bad_row = {1};
  EXPECT_THROW(m.tf->forward(SeqBatch{ghost, tok, pos, root}, pool, lg, last), Error);
  EXPECT_THROW(m.tf->forward(SeqBatch{one, bad_tok, pos, root}, pool, lg, last), Error);
  EXPECT_THROW(m.tf->forward(SeqBatch{one, tok, pos, bad_par}, pool, lg, last), Error);
  EXPECT_THROW(m.tf->forward(SeqBatch{one, tok, bad_pos, root}, pool, lg, last), Error);
  EXPECT_THROW(m.tf->forward(SeqBatch{one, tok, pos, root}, pool, lg, bad_row), Error);
  std::vector<float> small(m.V() - 1);
  EXPECT_THROW(m.tf->forward(SeqBatch{one, tok, pos, root}, pool, small, last), Error);
  EXPECT_EQ(pool.free_blocks(), 4);
  EXPECT_EQ(pool.pending(s), 0);
  // 13 positions: past max_rows (12); then 4 blocks of 4 for two sequences of 9: too few.
  std::vector<int32_t> long_seq(13, s), long_tok(13, 3), long_pos(13), long_par(13);
  for (int i = 0; i < 13; ++i) long_pos[i] = i, long_par[i] = i - 1;
  EXPECT_THROW(m.tf->forward(SeqBatch{long_seq, long_tok, long_pos, long_par}, pool, lg, last), Error);
  const int t = pool.add_sequence();
  std::vector<int32_t> both(18), both_tok(18, 3), both_pos(18), both_par(18);
  for (int i = 0; i < 18; ++i) both[i] = i < 9 ? s : t, both_pos[i] = i % 9, both_par[i] = i % 9 - 1;
  EXPECT_THROW(m.tf->forward(SeqBatch{both, both_tok, both_pos, both_par}, pool, lg, last), Error);
  EXPECT_EQ(pool.free_blocks(), 4);
  // One sequence through the pool equals the KvCache pass.
  KvCache kv = m.tf->make_cache(12);
  std::vector<float> want(2 * m.V());
  m.tf->forward(Batch{toks, poss, chain}, kv, want, LogitsRows::kAll);
  const std::vector<int32_t> rows = {0, 1};
  m.tf->forward(SeqBatch{two, toks, poss, chain}, pool, lg, rows);
  EXPECT_EQ(lg, want);
  EXPECT_EQ(pool.pending(s), 2);
}
