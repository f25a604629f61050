// Test helper: a model loaded resident on the CPU backend.
#pragma once
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "src/engine/transformer.h"
#include "src/engine/weights.h"
#include "src/model/model_desc.h"

namespace redwood::testutil {

struct TestModel {
  ModelDesc desc;
  std::unique_ptr<ResidentWeights> w;
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<Transformer> tf;
  explicit TestModel(const std::string& path) : desc(load_model_desc(path)) {
    w = std::make_unique<ResidentWeights>(desc);
    tf = std::make_unique<Transformer>(desc, *w, *be);
  }
  int V() const { return desc.hp.vocab; }
};

}  // namespace redwood::testutil
