// The llama.cpp oracle for tests/python/test_llamacpp_oracle.py: runs a GGUF
// model through libllama (llama.cpp's own architecture code), CPU only, with an
// F32 KV cache, and writes
//   - the logits of every position of one causal pass over TOKENS as a float32
//     .npy [n, vocab] (the shape `redwood logits` writes), and
//   - with GREEDY_N > 0, the greedy continuation's ids as one JSON array on stdout.
//
//   llamacpp-logits MODEL.gguf 1,2,3 OUT.npy [GREEDY_N]
//
// Not part of Redwood: compiled by the test against the llama.cpp build that
// bench/llamacpp_reference.sh's download gives (build/llamacpp), never linked
// into the runtime. Exit 1 with one line on stderr on any error.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int fail(const char* msg) {
  fprintf(stderr, "llamacpp-logits: %s\n", msg);
  return 1;
}

static int write_npy(const char* path, const float* data, int rows, int cols) {
  FILE* f = fopen(path, "wb");
  if (!f) return 0;
  char dict[128];
  int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
  const int total = 10 + n + 1;  // magic(6) + version(2) + len(2) + dict + '\n'
  const int pad = (64 - total % 64) % 64;
  const unsigned short hlen = (unsigned short)(n + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc(hlen & 0xff, f);
  fputc(hlen >> 8, f);
  fwrite(dict, 1, (size_t)n, f);
  for (int i = 0; i < pad; ++i) fputc(' ', f);
  fputc('\n', f);
  const size_t count = (size_t)rows * (size_t)cols;
  const int ok = fwrite(data, sizeof(float), count, f) == count;
  return fclose(f) == 0 && ok;
}

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) return fail("usage: llamacpp-logits MODEL.gguf 1,2,3 OUT.npy [GREEDY_N]");
  const int greedy_n = argc == 5 ? atoi(argv[4]) : 0;
  int n = 0, cap = 16;
  llama_token* toks = malloc(sizeof(llama_token) * (size_t)cap);
  for (char* p = argv[2]; *p;) {
    char* end = NULL;
    const long v = strtol(p, &end, 10);
    if (end == p) return fail("bad token list");
    if (n == cap) toks = realloc(toks, sizeof(llama_token) * (size_t)(cap *= 2));
    toks[n++] = (llama_token)v;
    p = *end == ',' ? end + 1 : end;
  }
  if (n == 0) return fail("empty token list");

  llama_log_set(quiet, NULL);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return fail("cannot load the model");
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)(n + greedy_n + 16);
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  cp.type_k = GGML_TYPE_F32;  // as Redwood's default F32 KV rows
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // plain softmax attention in F32
  cp.no_perf = true;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return fail("cannot create a context");

  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = toks[i];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  if (llama_decode(ctx, b) != 0) return fail("llama_decode failed on the prompt");
  float* all = malloc(sizeof(float) * (size_t)n * (size_t)vocab);
  for (int i = 0; i < n; ++i) memcpy(all + (size_t)i * vocab, llama_get_logits_ith(ctx, i), sizeof(float) * (size_t)vocab);
  if (!write_npy(argv[3], all, n, vocab)) return fail("cannot write the .npy file");

  if (greedy_n > 0) {
    const float* last = all + (size_t)(n - 1) * vocab;
    printf("[");
    for (int g = 0; g < greedy_n; ++g) {
      int best = 0;
      for (int v = 1; v < vocab; ++v)
        if (last[v] > last[best]) best = v;
      printf(g ? ",%d" : "%d", best);
      if (g + 1 == greedy_n) break;
      struct llama_batch one = llama_batch_init(1, 0, 1);
      one.token[0] = best;
      one.pos[0] = n + g;
      one.n_seq_id[0] = 1;
      one.seq_id[0][0] = 0;
      one.logits[0] = 1;
      one.n_tokens = 1;
      if (llama_decode(ctx, one) != 0) return fail("llama_decode failed while generating");
      llama_batch_free(one);
      last = llama_get_logits_ith(ctx, 0);
    }
    printf("]\n");
  }
  llama_batch_free(b);
  free(all);
  free(toks);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
