#include "src/engine/kv_cache.h"

#include <atomic>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>

#include "src/util/error.h"

namespace redwood {

uint64_t KvCache::next_id() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

DType kv_type_from_name(const std::string& name, const char* what) {
  static constexpr DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0};
  static_assert(std::size(kTypes) == std::size(kKvTypeNames));
  for (size_t i = 0; i < std::size(kKvTypeNames); ++i)
    if (name == kKvTypeNames[i]) return kTypes[i];
  throw Error((what ? std::string(what) + ": " : std::string()) + "expected " + kv_type_list(" | ") + ", got '" + name +
              "'");
}

std::string kv_type_list(const char* sep) {
  std::string list;
  for (const char* n : kKvTypeNames) list += (list.empty() ? "" : sep) + std::string(n);
  return list;
}

std::string kv_type_name(DType t) {
  for (const char* n : kKvTypeNames)
    if (kv_type_from_name(n) == t) return n;
  return std::string(dtype_name(t));
}

void check_kv_type(DType t) {
  if (!is_kv_type(t))
    throw Error("the KV cache type must be one of " + kv_type_list(", ") + ", not " + std::string(dtype_name(t)));
}

uint64_t kv_row_bytes(DType t, int64_t kv_dim) {
  check_kv_type(t);
  const std::optional<uint64_t> b = kv_dim > 0 ? row_bytes(t, static_cast<uint64_t>(kv_dim)) : std::nullopt;
  if (!b)
    throw Error("KV rows of " + kv_type_name(t) + " need a positive length that is a multiple of " +
                std::to_string(dtype_info(t).block_elems) + ", got " + std::to_string(kv_dim));
  return *b;
}

void check_kv_head_dim(DType t, int head_dim, const std::string& model) {
  check_kv_type(t);
  const int block = static_cast<int>(dtype_info(t).block_elems);
  if (block > 1 && (head_dim <= 0 || head_dim % block != 0))
    throw Error("--kv-type " + kv_type_name(t) + " needs a head_dim that is a multiple of " + std::to_string(block) +
                "; " + model + " has head_dim " + std::to_string(head_dim));
}

void KvCache::check_type(DType t) {
  check_kv_type(t);
}

KvCache::KvCache(Backend& be, int n_layers, int kv_dim, int capacity, DType type)
    : be_(&be), kv_dim_(kv_dim), capacity_(capacity), type_(type) {
  if (n_layers <= 0 || kv_dim <= 0 || capacity <= 0) throw Error("invalid KV cache shape");
  check_type(type);
  const size_t bytes = static_cast<size_t>(capacity) * kv_row_bytes(type, kv_dim);
  for (int l = 0; l < n_layers; ++l) {
    k_.emplace_back(be, bytes);
    v_.emplace_back(be, bytes);
  }
}

KvCache::KvCache(const KvCache& o)
    : be_(o.be_),
      kv_dim_(o.kv_dim_),
      capacity_(o.capacity_),
      type_(o.type_),
      committed_(o.committed_),
      block_parent_(o.block_parent_),
      block_pos_(o.block_pos_) {
  const size_t used = static_cast<size_t>(committed_ + pending()) * kv_row_bytes(type_, kv_dim_);
  for (size_t l = 0; l < o.k_.size(); ++l) {
    k_.emplace_back(*be_, o.k_[l].size());
    v_.emplace_back(*be_, o.v_[l].size());
    be_->copy(k_.back().as(), o.k_[l].as(), used);
    be_->copy(v_.back().as(), o.v_[l].as(), used);
  }
}

uint64_t KvCache::bytes() const {
  return 2ull * k_.size() * capacity_ * kv_row_bytes(type_, kv_dim_);
}

void KvCache::append_pending(std::span<const int32_t> parents, std::span<const int32_t> positions) {
  if (positions.size() != parents.size()) throw Error("KV cache: pending rows' parents and positions differ in length");
  if (committed_ + pending() + static_cast<int>(parents.size()) > capacity_)
    throw Error("KV cache: pending block past capacity");
  block_parent_.insert(block_parent_.end(), parents.begin(), parents.end());
  block_pos_.insert(block_pos_.end(), positions.begin(), positions.end());
}

void KvCache::commit_prefix(int n) {
  if (n < 0 || n > pending()) throw Error("KV cache: commit_prefix beyond the pending block");
  committed_ += n;
  clear_block();
}

void KvCache::commit_path(std::span<const int32_t> rows) {
  int prev = -1;
  for (int32_t r : rows) {
    if (r <= prev || r >= pending()) throw Error("KV cache commit_path: rows must ascend within the pending block");
    prev = r;
  }
  // Row j moves down from committed + rows[j] to committed + j. In ascending
  // order no row is overwritten before it moves (rows[j] >= j); runs of
  // consecutive rows move as one copy. Copies are ordered like the ops.
  const size_t row = kv_row_bytes(type_, kv_dim_);
  for (size_t j = 0; j < rows.size();) {
    size_t e = j + 1;
    while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
    if (rows[j] != static_cast<int32_t>(j)) {
      const size_t dst = (committed_ + j) * row;
      const size_t src = (committed_ + rows[j]) * row;
      for (size_t l = 0; l < k_.size(); ++l) {
        char* kb = static_cast<char*>(k(static_cast<int>(l)));
        char* vb = static_cast<char*>(v(static_cast<int>(l)));
        be_->copy(kb + dst, kb + src, row * (e - j));
        be_->copy(vb + dst, vb + src, row * (e - j));
      }
    }
    j = e;
  }
  committed_ += static_cast<int>(rows.size());
  clear_block();
}

void KvCache::truncate(int n) {
  if (n < 0 || n > committed_) throw Error("KV cache truncate out of range");
  committed_ = n;
  clear_block();
}

}  // namespace redwood
