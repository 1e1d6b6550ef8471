// The small per-layer ops as one C++ call each: RMSNorm (with the residual add fused), rotary embedding
// in place and the KV-cache store. In torch each is 5 to 15 tiny ATen ops; at batch 1 a decode step
// ran ~200 of them per layer, about 6 ms of a 33 ms step on two cores, for no arithmetic. (SiLU-and-mul
// as an op is two ATen ops whose vectorised exp a scalar loop here did not beat: 0.4-0.8x; it stays in
// torch, and only the one-call decode step, which cannot call ATen, uses silu_and_mul_row.)
//
// Every op computes in fp32 and rounds where the torch reference in kernels/ rounds, so fp32 results
// match the reference up to summation order and bf16/fp16 ones up to the final rounding. Rows run in
// parallel only when there are enough of them to pay for waking the other threads.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <vector>

#include "fused_ops.h"
#include "ops.h"

namespace sllm_cpu {

// Rows of `width` elements per parallel chunk: about 256K elements (~100 us of work), so a decode step of
// up to a few hundred rows runs on the calling thread and only a long prefill spreads over all of them.
// At 16K, a 32-row step of a 576-wide model (18K elements) opened a parallel region for ~30 us of work:
// 0.5-2.6 ms on a 2-core machine with another job on it, 9% of the serving engine's thread.
static int64_t grain_rows(int64_t width) { return std::max<int64_t>(1, (1 << 18) / std::max<int64_t>(1, width)); }

static void check_cpu(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), "sllm_cpu: ", name, " must be a CPU tensor");
}

#define SLLM_DISPATCH_FLOATS(dtype, NAME, ...)                                                    \
  [&] {                                                                                          \
    switch (dtype) {                                                                             \
      case at::kFloat: {                                                                         \
        using scalar_t = float;                                                                  \
        return __VA_ARGS__();                                                                    \
      }                                                                                          \
      case at::kBFloat16: {                                                                      \
        using scalar_t = c10::BFloat16;                                                          \
        return __VA_ARGS__();                                                                    \
      }                                                                                          \
      case at::kHalf: {                                                                          \
        using scalar_t = c10::Half;                                                              \
        return __VA_ARGS__();                                                                    \
      }                                                                                          \
      default:                                                                                   \
        TORCH_CHECK(false, "sllm_cpu: ", NAME, " supports float32, bfloat16 and float16, not ", dtype); \
    }                                                                                            \
  }()

// out = weight * (x * rsqrt(mean(x^2) + eps)), the normalised value rounded to x's dtype before the
// product as HF's LlamaRMSNorm does; the product is rounded to out's dtype.
template <typename T, typename W, typename O>
void norm_row(const T* x, const W* w, O* out, int64_t n, float eps) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(x[i]);
    ss += v * v;
  }
  const float r = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float h = static_cast<float>(static_cast<T>(static_cast<float>(x[i]) * r));
    out[i] = static_cast<O>(static_cast<float>(w[i]) * h);
  }
}

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) { norm_row(x, w, out, n, eps); }

static at::Tensor norm_out(const at::Tensor& x, const at::Tensor& weight) {
  return at::empty(x.sizes(), x.options().dtype(at::promote_types(x.scalar_type(), weight.scalar_type())));
}

static void check_norm(const at::Tensor& x, const at::Tensor& weight) {
  check_cpu(x, "x");
  check_cpu(weight, "weight");
  TORCH_CHECK(weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == weight.size(0),
              "sllm_cpu: rms_norm weight must be [hidden] matching x's last dimension");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type() || weight.scalar_type() == at::kFloat,
              "sllm_cpu: rms_norm weight must have x's dtype or float32");
}

// Rows of x through norm_row into out; W is the weight's type (x's, or float32, which promotes out).
template <typename T, typename W>
void norm_rows(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out, double eps) {
  using O = std::conditional_t<std::is_same_v<W, float>, float, T>;
  const int64_t n = x.size(-1), rows = x.numel() / std::max<int64_t>(1, n);
  const T* xp = x.data_ptr<T>();
  const W* wp = weight.data_ptr<W>();
  O* op = out.data_ptr<O>();
  at::parallel_for(0, rows, grain_rows(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) norm_row(xp + r * n, wp, op + r * n, n, static_cast<float>(eps));
  });
}

static void norm_into(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out, double eps) {
  SLLM_DISPATCH_FLOATS(x.scalar_type(), "rms_norm", [&] {
    if (weight.scalar_type() == at::kFloat) {
      norm_rows<scalar_t, float>(x, weight, out, eps);
    } else {
      norm_rows<scalar_t, scalar_t>(x, weight, out, eps);
    }
  });
}

at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
  check_norm(x_in, weight_in);
  const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  at::Tensor out = norm_out(x, weight);
  norm_into(x, weight, out, eps);
  return out;
}

// (norm(x + residual), x + residual): the sum is rounded to x's dtype first, as the reference adds.
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x_in, const at::Tensor& residual_in,
                                                      const at::Tensor& weight_in, double eps) {
  check_norm(x_in, weight_in);
  check_cpu(residual_in, "residual");
  TORCH_CHECK(residual_in.sizes() == x_in.sizes() && residual_in.scalar_type() == x_in.scalar_type(),
              "sllm_cpu: residual must match x in shape and dtype");
  const at::Tensor x = x_in.contiguous(), residual = residual_in.contiguous(), weight = weight_in.contiguous();
  at::Tensor sum = at::empty_like(x);
  at::Tensor out = norm_out(x, weight);
  const int64_t n = x.size(-1), rows = x.numel() / std::max<int64_t>(1, n);
  SLLM_DISPATCH_FLOATS(x.scalar_type(), "rms_norm", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* rp = residual.data_ptr<scalar_t>();
    scalar_t* sp = sum.data_ptr<scalar_t>();
    at::parallel_for(0, rows * n, grain_rows(1), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sp[i] = static_cast<scalar_t>(static_cast<float>(xp[i]) + static_cast<float>(rp[i]));
    });
  });
  norm_into(sum, weight, out, eps);
  return {out, sum};
}

// Neox-style rotation of q [T, Hq, D] and k [T, Hkv, D] in place (any token and head strides, unit
// stride inside a head, so they can be views into the fused QKV projection). cos_sin_cache is
// float32 [max_position, D]: cos of the D/2 frequencies, then their sin.
template <typename T>
void rotate(T* x, int64_t half, const float* cs) {
  for (int64_t i = 0; i < half; ++i) {
    const float c = cs[i], s = cs[half + i];
    const float x1 = static_cast<float>(x[i]), x2 = static_cast<float>(x[half + i]);
    x[i] = static_cast<T>(x1 * c - x2 * s);
    x[half + i] = static_cast<T>(x2 * c + x1 * s);
  }
}

void rotate_head(float* x, int64_t half, const float* cos_sin) { rotate(x, half, cos_sin); }

template <typename T>
void rotate_heads(T* base, int64_t t, int64_t heads, int64_t s_tok, int64_t s_head, int64_t half, const float* cs) {
  for (int64_t h = 0; h < heads; ++h) rotate(base + t * s_tok + h * s_head, half, cs);
}

void rotary_embedding(const at::Tensor& positions_in, at::Tensor& q, at::Tensor& k, const at::Tensor& cache_in) {
  check_cpu(q, "q");
  check_cpu(k, "k");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0) && q.size(2) == k.size(2),
              "sllm_cpu: rotary_embedding takes q [T, Hq, D] and k [T, Hkv, D]");
  TORCH_CHECK(q.scalar_type() == k.scalar_type(), "sllm_cpu: q and k dtypes differ");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1, "sllm_cpu: head_dim must be contiguous");
  const int64_t tokens = q.size(0), dim = q.size(2), half = dim / 2;
  const at::Tensor cache = cache_in.to(at::kFloat).contiguous();
  TORCH_CHECK(cache.dim() == 2 && cache.size(1) == dim, "sllm_cpu: cos_sin_cache must be [max_position, D]");
  const at::Tensor positions = positions_in.to(at::kLong).contiguous();
  TORCH_CHECK(positions.numel() == tokens, "sllm_cpu: one position per token");
  const int64_t* pos = positions.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(pos[t] >= 0 && pos[t] < cache.size(0), "sllm_cpu: position ", pos[t], " outside the rotary cache");
  }
  const float* cs = cache.data_ptr<float>();
  SLLM_DISPATCH_FLOATS(q.scalar_type(), "rotary_embedding", [&] {
    scalar_t* qp = q.data_ptr<scalar_t>();
    scalar_t* kp = k.data_ptr<scalar_t>();
    at::parallel_for(0, tokens, grain_rows((q.size(1) + k.size(1)) * dim), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const float* row = cs + pos[t] * dim;
        rotate_heads(qp, t, q.size(1), q.stride(0), q.stride(1), half, row);
        rotate_heads(kp, t, k.size(1), k.stride(0), k.stride(1), half, row);
      }
    });
  });
}

// k/v [T, Hkv, D] into the caches' logical [num_blocks, block_size, Hkv, D] views (any strides, unit
// stride inside a head: the engine's caches are head-major underneath); slot -1 is padding, skipped.
template <typename T>
void store_rows(const at::Tensor& src, at::Tensor& cache, const int64_t* slots, int64_t tokens) {
  const int64_t heads = src.size(1), dim = src.size(2), block_size = cache.size(1);
  const T* sp = src.data_ptr<T>();
  T* cp = cache.data_ptr<T>();
  const int64_t strides[3] = {cache.stride(0), cache.stride(1), cache.stride(2)};
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    for (int64_t h = 0; h < heads; ++h) {
      const T* from = sp + t * src.stride(0) + h * src.stride(1);
      std::copy(from, from + dim, cp + kv_slot_offset(slots[t], h, block_size, strides));
    }
  }
}

void store_kv(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
              const at::Tensor& slot_mapping_in) {
  check_cpu(k, "k");
  check_cpu(v, "v");
  check_cpu(k_cache, "k_cache");
  check_cpu(v_cache, "v_cache");
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes(), "sllm_cpu: k and v must be [T, Hkv, D]");
  TORCH_CHECK(k_cache.dim() == 4 && v_cache.sizes() == k_cache.sizes() && k_cache.size(2) == k.size(1) &&
                  k_cache.size(3) == k.size(2),
              "sllm_cpu: caches must be [num_blocks, block_size, Hkv, D] matching k");
  TORCH_CHECK(k.scalar_type() == k_cache.scalar_type() && v.scalar_type() == k_cache.scalar_type() &&
                  v_cache.scalar_type() == k_cache.scalar_type(),
              "sllm_cpu: store_kv needs k, v and the caches in one dtype");
  TORCH_CHECK(k.stride(2) == 1 && v.stride(2) == 1 && k_cache.stride(3) == 1 && v_cache.stride(3) == 1,
              "sllm_cpu: head_dim must be contiguous");
  const at::Tensor slot_mapping = slot_mapping_in.to(at::kLong).contiguous();
  const int64_t tokens = k.size(0);
  TORCH_CHECK(slot_mapping.numel() == tokens, "sllm_cpu: one slot per token");
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  const int64_t num_slots = k_cache.size(0) * k_cache.size(1);
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(slots[t] < num_slots, "sllm_cpu: slot ", slots[t], " outside the KV cache");
  }
  SLLM_DISPATCH_FLOATS(k.scalar_type(), "store_kv", [&] {
    store_rows<scalar_t>(k, k_cache, slots, tokens);
    store_rows<scalar_t>(v, v_cache, slots, tokens);
  });
}

// silu(g) = g / (1 + exp(-g)), the form ATen's silu computes.
void silu_and_mul_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace sllm_cpu

TORCH_LIBRARY_FRAGMENT(sllm_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("rotary_embedding(Tensor positions, Tensor(a!) q, Tensor(b!) k, Tensor cos_sin_cache) -> ()");
  m.def("store_kv(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor slot_mapping) -> ()");
}

TORCH_LIBRARY_IMPL(sllm_cpu, CPU, m) {
  m.impl("rms_norm", &sllm_cpu::rms_norm);
  m.impl("fused_add_rms_norm", &sllm_cpu::fused_add_rms_norm);
  m.impl("rotary_embedding", &sllm_cpu::rotary_embedding);
  m.impl("store_kv", &sllm_cpu::store_kv);
}
