// SpecTr k-Seq (src/speculative/spectr.h) and the target-sample verifier: rho* (the
// notes' test vectors, the upper-end property, an independent bisection), the
// exact output law by enumeration (single node, trees and K sequences through
// the path-class walk), acceptance against the optimal multi-draft coupling
// (max flow), Monte Carlo chi-square through verify_tree, and the naive
// per-draft rule as a negative control.
// NAMING: p = TARGET, q = DRAFT here; shared/papers/NOTES-spectr-multidraft.md
// uses p for the draft and q for the target, so its vectors are swapped below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "src/speculative/spectr.h"
#include "src/speculative/verify.h"
#include "src/util/error.h"
#include "tests/util/spec_testing.h"

namespace redwood::spec {
namespace {

using namespace testutil;  // toy models, shapes, exact laws, chi-square (tests/util/spec_testing.h)

double f_of(const std::vector<double>& p, const std::vector<double>& q, int k, double rho) {
  const double b = spectr_beta(p, q, rho);
  return 1 - std::pow(1 - b, k) - rho * b;
}

// k-Seq's exact output law for given drafts (the SpecTrNode arithmetic).
std::vector<double> spectr_law(const std::vector<double>& p, const std::vector<double>& q,
                               const std::vector<int32_t>& drafts) {
  SpecTrNode n;
  n.begin(p, q, static_cast<int>(drafts.size()));
  std::vector<double> law(p.size(), 0.0);
  double rej = 1;
  for (int32_t x : drafts) {
    const double a = n.accept_probability(x);
    law[static_cast<size_t>(x)] += rej * a;
    rej *= 1 - a;
  }
  const auto r = n.residual();
  for (size_t y = 0; y < p.size(); ++y) law[y] += rej * r[y];
  return law;
}

// The INVALID naive rule (notes A2): each draft tested with the single-draft
// rule min(1, p/q), all rejected -> norm(max(p - q, 0)).
std::vector<double> naive_law(const std::vector<double>& p, const std::vector<double>& q,
                              const std::vector<int32_t>& drafts) {
  std::vector<double> law(p.size(), 0.0), res(p.size());
  double rej = 1, s = 0;
  for (int32_t x : drafts) {
    const double a = std::min(1.0, p[static_cast<size_t>(x)] / q[static_cast<size_t>(x)]);
    law[static_cast<size_t>(x)] += rej * a;
    rej *= 1 - a;
  }
  for (size_t y = 0; y < p.size(); ++y) s += res[y] = std::max(p[y] - q[y], 0.0);
  for (size_t y = 0; y < p.size(); ++y) law[y] += rej * (s > 0 ? res[y] / s : p[y]);
  return law;
}

std::vector<double> target_sample_law(const std::vector<double>& p, const std::vector<double>&,
                                      const std::vector<int32_t>&) {
  return p;
}

// ---- rho* -------------------------------------------------------------------------------

TEST(SpecTrRho, NotesTestVectors) {
  // Notes A5: draft (.7,.2,.1) -> target (.2,.3,.5).
  const std::vector<double> p = {0.2, 0.3, 0.5}, q = {0.7, 0.2, 0.1};
  struct V5 {
    int k;
    double rho, acc;
  };
  for (const V5 c : {V5{2, 1.5844, 0.6584}, V5{3, 2.1, 0.71}, V5{4, 2.5475, 0.7547}, V5{8, 3.7892, 0.8789}}) {
    SpecTrNode n;
    n.begin(p, q, c.k);
    std::printf("[ spectr ] notes A5 k=%d: rho* = %.6f (notes %.4f), acceptance %.6f (notes %.4f)\n", c.k, n.rho(),
                c.rho, n.acceptance(), c.acc);
    EXPECT_NEAR(n.rho(), c.rho, 1e-4);
    EXPECT_NEAR(n.acceptance(), c.acc, 1e-4);
  }
  // U(12) draft -> U(4) target, k = 4: rho* = r (1 - (1 - 1/r)^k) with r = 3, acceptance 1 - (2/3)^4.
  std::vector<double> u12(12, 1.0 / 12), u4(12, 0.0);
  for (int t = 0; t < 4; ++t) u4[static_cast<size_t>(t)] = 0.25;
  SpecTrNode n;
  n.begin(u4, u12, 4);
  std::printf("[ spectr ] U(12)->U(4) k=4: rho* = %.6f, acceptance %.6f (notes 2.4074, .80247)\n", n.rho(),
              n.acceptance());
  EXPECT_NEAR(n.rho(), 3 * (1 - std::pow(2.0 / 3, 4)), 1e-12);
  EXPECT_NEAR(n.acceptance(), 1 - std::pow(2.0 / 3, 4), 1e-12);
  // Ber(.25) draft -> Ber(.75) target, k = 2: .6483 (optimum .6875).
  const std::vector<double> tb = {0.25, 0.75}, db = {0.75, 0.25};
  n.begin(tb, db, 2);
  std::printf("[ spectr ] Ber(.25)->Ber(.75) k=2: acceptance %.6f (notes .6483), optimum %.6f (notes .6875)\n",
              n.acceptance(), testutil::optimal_acceptance(tb, db, 2));
  EXPECT_NEAR(n.acceptance(), 0.6483, 1e-4);
  EXPECT_NEAR(testutil::optimal_acceptance(tb, db, 2), 0.6875, 1e-12);
}

TEST(SpecTrRho, ExactSolveMatchesBisectionAndIsTheUpperEnd) {
  for (int trial = 0; trial < 300; ++trial) {
    const int V = 2 + trial % 40;
    const int k = 1 + trial % 9;
    const auto p = random_dist(1000 + trial, V, trial % 3 == 0 ? 0.3 : 0.0);
    const auto q = random_dist(5000 + trial, V, trial % 4 == 0 ? 0.3 : 0.0);
    const double rho = spectr_rho_star(p, q, k);
    ASSERT_GE(rho, 1.0);
    ASSERT_LE(rho, static_cast<double>(k));
    // Independent plain bisection of f (f decreasing, f(1) >= 0 >= f(k)).
    double lo = 1, hi = k;
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + hi);
      (f_of(p, q, k, mid) <= 0 ? hi : lo) = mid;
    }
    const double scale = std::max(1e-300, spectr_beta(p, q, rho));
    EXPECT_LE(f_of(p, q, k, rho) / scale, 1e-12) << "trial " << trial;
    if (k > 1 && f_of(p, q, k, 1.0) > 1e-12) {
      EXPECT_NEAR(rho, hi, 1e-9) << "trial " << trial;
    }
    // The residual needs no clamping beyond rounding: every unclamped entry >= -1e-14.
    SpecTrNode n;
    n.begin(p, q, k);
    const double scale2 = n.beta() > 0 ? n.acceptance() / n.beta() : 0;
    for (int x = 0; x < V; ++x)
      EXPECT_GE(
          p[static_cast<size_t>(x)] - std::min(q[static_cast<size_t>(x)], p[static_cast<size_t>(x)] / rho) * scale2,
          -1e-14);
  }
}

TEST(SpecTrRho, KOneIsSingleDraft) {
  for (int trial = 0; trial < 50; ++trial) {
    const int V = 2 + trial % 6;
    const auto p = random_dist(300 + trial, V, 0.25), q = random_dist(400 + trial, V, 0.25);
    SpecTrNode n;
    n.begin(p, q, 1);
    EXPECT_EQ(n.rho(), 1.0);
    double tv = 0, rs = 0;
    for (int x = 0; x < V; ++x) {
      const size_t i = static_cast<size_t>(x);
      tv += std::abs(p[i] - q[i]) / 2;
      rs += std::max(p[i] - q[i], 0.0);
      EXPECT_NEAR(n.accept_probability(x), q[i] > 0 ? std::min(1.0, p[i] / q[i]) : 0.0, 1e-15);
    }
    EXPECT_NEAR(n.acceptance(), 1 - tv, 1e-12);
    const auto r = n.residual();
    for (int x = 0; x < V; ++x) {
      if (rs > 1e-12) {
        EXPECT_NEAR(r[static_cast<size_t>(x)],
                    std::max(p[static_cast<size_t>(x)] - q[static_cast<size_t>(x)], 0.0) / rs, 1e-12);
      }
    }
  }
}

// ---- exact output law -------------------------------------------------------------------

TEST(SpecTrExact, SingleNodeLawEqualsTarget) {
  int checked = 0;
  auto run = [&](const std::string& name, const std::vector<double>& p, const std::vector<double>& q) {
    for (int k = 1; k <= 4; ++k) {
      SCOPED_TRACE(name + " k=" + std::to_string(k));
      const auto law = averaged_law(spectr_law, p, q, k);
      EXPECT_LE(testutil::max_abs_diff(law, p), 1e-12);
      ++checked;
    }
  };
  for (const PQ& c : edge_cases()) run(c.name, norm(c.p), norm(c.q));
  for (int trial = 0; trial < 30; ++trial) {
    const int V = 3 + trial % 3;
    run("random " + std::to_string(trial), random_dist(10 + trial, V, 0.2), random_dist(90 + trial, V, 0.2));
  }
  EXPECT_EQ(checked, 4 * (12 + 30));
}

TEST(SpecTrExact, NaiveRuleIsNotLossless) {
  // Notes A2: draft Ber(1), target Ber(1/2): the naive rule outputs token 0 w.p. 1 - 2^-k.
  for (int k = 2; k <= 4; ++k) {
    const std::vector<double> p = {0.5, 0.5}, q = {1.0, 0.0};
    const auto law = averaged_law(naive_law, p, q, k);
    EXPECT_NEAR(law[0], 1 - std::pow(0.5, k), 1e-12);
    EXPECT_NEAR(averaged_law(spectr_law, p, q, k)[0], 0.5, 1e-12);
  }
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4}, q = {0.4, 0.3, 0.2, 0.1};
  EXPECT_GT(testutil::max_abs_diff(averaged_law(naive_law, p, q, 3), p), 0.05);
}

TEST(SpecTrExact, TreeAndSequenceLawEqualsTarget) {
  EXPECT_EQ(expect_class_laws_equal_target(spectr_law), 7 * 2 * 2);
}

TEST(SpecTrExact, NaiveRuleFailsOnSequences) {
  Toy P = testutil::logit_model(4, 11, 1.0, 1.0, 0.0), Q = testutil::logit_model(4, 12, 1.5, 1.0, 0.0);
  const Shape seq = testutil::chains(3, 2);
  ClassEnumerator e(seq, P, Q, naive_law);
  EXPECT_GT(testutil::max_abs_diff(e.law(2), e.target_law({}, 2)), 1e-3);
}

// ---- acceptance ---------------------------------------------------------------------------

TEST(SpecTrAcceptance, OptimalCouplingVectorsAndClosedForms) {
  // Notes A5: optimal alpha_1..alpha_5 for draft (.7,.2,.1) -> target (.2,.3,.5).
  const std::vector<double> p = {0.2, 0.3, 0.5}, q = {0.7, 0.2, 0.1};
  const double want[] = {0.5, 0.69, 0.771, 0.8439, 0.90951};
  for (int k = 1; k <= 5; ++k) {
    const double a = testutil::optimal_acceptance(p, q, k);
    std::printf("[ spectr ] optimal alpha_%d = %.6f (notes %.5g)\n", k, a, want[k - 1]);
    EXPECT_NEAR(a, want[k - 1], 1e-4);
  }
  // Closed forms: Bernoulli and uniform -> uniform.
  for (double a : {0.1, 0.25, 0.6})
    for (double b : {0.3, 0.75, 0.9})
      for (int k = 1; k <= 4; ++k) {
        const std::vector<double> tb = {1 - b, b}, db = {1 - a, a};
        EXPECT_NEAR(testutil::optimal_acceptance(tb, db, k),
                    std::min(b, 1 - std::pow(1 - a, k)) + std::min(1 - b, 1 - std::pow(a, k)), 1e-12);
      }
  std::vector<double> u6(6, 1.0 / 6), u3(6, 0.0);
  for (int t = 0; t < 3; ++t) u3[static_cast<size_t>(t)] = 1.0 / 3;
  for (int k = 1; k <= 3; ++k) {
    SpecTrNode n;
    n.begin(u3, u6, k);
    EXPECT_NEAR(testutil::optimal_acceptance(u3, u6, k), 1 - std::pow(0.5, k), 1e-12);
    EXPECT_NEAR(n.acceptance(), 1 - std::pow(0.5, k), 1e-12);  // k-Seq is optimal there
  }
}

TEST(SpecTrAcceptance, AtLeastOneMinusOneOverEOfOptimum) {
  double worst = 1;
  for (int trial = 0; trial < 120; ++trial) {
    const int V = 2 + trial % 3;
    const int k = 1 + trial % 3;
    const auto p = random_dist(700 + trial, V, 0.15), q = random_dist(800 + trial, V, 0.15);
    SpecTrNode n;
    n.begin(p, q, k);
    const double opt = testutil::optimal_acceptance(p, q, k);
    // Also: the acceptance formula = P(some draft accepted) by enumeration.
    double acc = 0;
    testutil::for_each_tuple(q, k, [&](const std::vector<int32_t>& t, double pr) {
      double rej = 1;
      for (int32_t x : t) rej *= 1 - n.accept_probability(x);
      acc += pr * (1 - rej);
    });
    EXPECT_NEAR(acc, n.acceptance(), 1e-12);
    EXPECT_LE(n.acceptance(), opt + 1e-12);
    EXPECT_GE(n.acceptance(), (1 - std::pow(1 - 1.0 / k, k)) * opt - 1e-12) << "trial " << trial;
    if (opt > 0) worst = std::min(worst, n.acceptance() / opt);
  }
  std::printf("[ spectr ] worst k-Seq / optimum over random cases: %.4f (bound 1 - 1/e = %.4f)\n", worst,
              1 - std::exp(-1.0));
}

// ---- Monte Carlo through verify_tree ----------------------------------------------------

struct McConfig {
  std::string name;
  Verifier v;
  Shape shape;
  std::function<Toy()> P, Q;
  int m = 1;
};

// p-values per seed; checks the hit rate (first token is a root draft) within
// 3 sigma of the exact value.
std::vector<double> run_mc(const McConfig& c, const NodeLawFn& f) {
  Toy P = c.P(), Q = c.Q();
  return testutil::run_class_mc(c.name, c.v, c.shape, P, Q, c.m, f);
}

TEST(SpecTrMonteCarlo, LosslessChiSquare) {
  auto fixedP = [] { return testutil::constant_model({0.2, 0.3, 0.5}); };
  auto fixedQ = [] { return testutil::constant_model({0.7, 0.2, 0.1}); };
  const std::vector<McConfig> cfgs = {
      {"spectr star3 notes A5", Verifier::kSpecTr, testutil::chains(3, 1), fixedP, fixedQ, 1},
      {"spectr star4 toy T=1", Verifier::kSpecTr, testutil::chains(4, 1),
       [] { return testutil::logit_model(4, 11, 1.0, 1.0, 0.2); },
       [] { return testutil::logit_model(4, 12, 1.5, 1.0, 0.25); }, 1},
      {"spectr 3 seqs x 2 toy, first 2", Verifier::kSpecTr, testutil::chains(3, 2),
       [] { return testutil::logit_model(4, 11, 1.0, 0.6, 0.2); },
       [] { return testutil::logit_model(4, 12, 1.5, 0.6, 0.25); }, 2},
      {"spectr binary2 toy, first 2", Verifier::kSpecTr, testutil::full_tree(2, 2),
       [] { return testutil::logit_model(4, 11, 1.0, 1.0, 0.2); },
       [] { return testutil::logit_model(4, 12, 1.5, 1.0, 0.25); }, 2},
      // Root children {leaf, node with a child}: when their tokens agree, the
      // class's first node is a leaf (no draft distribution there).
      {"spectr leaf-first class V=3, first 2", Verifier::kSpecTr, testutil::shape_from_parents({-1, 0, 0, 2}),
       [] { return testutil::logit_model(3, 11, 1.0, 1.0, 0.0); },
       [] { return testutil::logit_model(3, 12, 1.0, 1.0, 0.0); }, 2},
  };
  for (const McConfig& c : cfgs)
    for (double p : run_mc(c, spectr_law)) EXPECT_GT(p, kAlpha) << c.name;
}

TEST(SpecTrMonteCarlo, NodeAcceptanceMatchesFormula) {
  // P(some draft accepted) = 1 - (1 - beta)^k, sampled at the node level.
  const std::vector<double> p = {0.2, 0.3, 0.5}, q = {0.7, 0.2, 0.1};
  const std::vector<float> qf = {0.7f, 0.2f, 0.1f};
  for (int k : {2, 4}) {
    SpecTrNode n;
    n.begin(p, q, k);
    Rng rng(100 + k);
    const long N = 1000000;
    long acc = 0;
    for (long i = 0; i < N; ++i) {
      const auto d = sample_children(Verifier::kSpecTr, qf, k, rng);
      for (int32_t x : d)
        if (n.accepts(x, rng.uniform())) {
          ++acc;
          break;
        }
    }
    const double rate = static_cast<double>(acc) / N, a = n.acceptance();
    const double sigma = std::sqrt(a * (1 - a) / N);
    std::printf("[ acc  ] spectr node k=%d: empirical %.5f, formula %.5f (3 sigma %.5f)\n", k, rate, a, 3 * sigma);
    EXPECT_LE(std::abs(rate - a), 3 * sigma);
  }
}

// The naive per-draft rule fails the same chi-square test (the test has power).
TEST(SpecTrMonteCarlo, NaiveRuleFails) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4}, q = {0.4, 0.3, 0.2, 0.1};
  const std::vector<float> qf = {0.4f, 0.3f, 0.2f, 0.1f};
  Law want;
  for (int y = 0; y < 4; ++y) want[{y}] = p[static_cast<size_t>(y)];
  for (uint64_t seed : kSeeds) {
    Rng rng(seed);
    std::map<std::vector<int32_t>, long> counts;
    for (long i = 0; i < kSamplesPerSeed; ++i) {
      const auto d = sample_children(Verifier::kSpecTr, qf, 3, rng);
      const auto law = naive_law(p, q, d);
      std::vector<float> lf(law.begin(), law.end());
      ++counts[{testutil::draw(lf, rng)}];
    }
    const double pv = testutil::chi_square_p(counts, want, kSamplesPerSeed);
    std::printf("[ chi2 ] naive per-draft rule seed %llu: p = %.4g\n", static_cast<unsigned long long>(seed), pv);
    EXPECT_LT(pv, kAlpha);
  }
}

// ---- target-sample ------------------------------------------------------------------------

TEST(TargetSample, ExactLawAnyChildren) {
  for (const auto& [name, shape] : testutil::class_shapes())
    for (int V : {3, 5}) {
      SCOPED_TRACE(name + " V=" + std::to_string(V));
      Toy P = testutil::logit_model(V, 31, 1.0, 0.8, 0.2), Q = testutil::logit_model(V, 32, 2.0, 0.8, 0.3);
      for (int m = 1; m <= 3; ++m) {
        ClassEnumerator e(shape, P, Q, target_sample_law);
        EXPECT_LE(testutil::max_abs_diff(e.law(m), e.target_law({}, m)), 1e-12);
      }
    }
}

TEST(TargetSample, ChiSquareAndHitRate) {
  const std::vector<McConfig> cfgs = {
      {"target-sample star3 toy", Verifier::kTargetSample, testutil::chains(3, 1),
       [] { return testutil::logit_model(4, 11, 1.0, 1.0, 0.2); },
       [] { return testutil::logit_model(4, 12, 1.5, 1.0, 0.25); }, 1},
      {"target-sample irregular toy, first 3", Verifier::kTargetSample,
       testutil::shape_from_parents({-1, 0, 1, 2, 1, 0, 5, 0, 7, 7}),
       [] { return testutil::logit_model(4, 11, 1.0, 1.0, 0.2); },
       [] { return testutil::logit_model(4, 12, 1.5, 1.0, 0.25); }, 3},
  };
  for (const McConfig& c : cfgs)
    for (double p : run_mc(c, target_sample_law)) EXPECT_GT(p, kAlpha) << c.name;
}

TEST(TargetSample, DescendsIntoMatchingChildAndNeverAsksForDraft) {
  // Target one-hot on token 2: the child with token 2 is always accepted.
  const std::vector<int32_t> parent = {-1, -1, -1, 1, 1}, token = {0, 2, 2, 3, 1};
  std::vector<float> root = {0, 0, 1, 0}, below = {0, 1, 0, 0};
  DistFn target = [&](int32_t u) -> std::span<const float> { return u < 0 ? root : below; };
  DistFn draft = [&](int32_t) -> std::span<const float> {
    ADD_FAILURE() << "target-sample must not ask for the draft";
    return root;
  };
  Rng rng(3);
  for (int i = 0; i < 20; ++i) {
    const VerifyResult r = verify_tree(Verifier::kTargetSample, TreeView{parent, token}, target, draft, rng);
    EXPECT_EQ(r.accepted, (std::vector<int32_t>{1, 4}));  // first child with token 2, then its child with token 1
    EXPECT_EQ(r.bonus, 1);                                // leaf: bonus from the target there
  }
}

}  // namespace
}  // namespace redwood::spec
