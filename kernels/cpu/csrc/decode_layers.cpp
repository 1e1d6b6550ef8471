// The op `torch.ops.sllm_cpu.decode_layers`: every decoder layer of a Llama-family model for a decode
// step of 1 to 4 float32 sequences, in one call. Its reference is the model's own Python layer loop
// (engine/models/llama.py), which it must match; it exists because at batch 1 that loop's ~12 op calls
// per layer cost Python and dispatcher time between the weight streams, and the streams are the step.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "ops.h"
#include "small_linear.h"

namespace sllm_cpu {
namespace {

at::Tensor bias_at(const std::vector<at::Tensor>& biases, size_t i) {
  return biases.empty() ? at::Tensor() : biases[i];
}

// y = x W^T (+ bias) with W in float32 [N, K] (`type` 0, GGML's F32) or in GGUF blocks (uint8 rows of
// blocks, `type` a GGML quantized type), as kernels.linear.linear dispatches them.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, int64_t type, const at::Tensor& bias = at::Tensor()) {
  const std::optional<at::Tensor> b = bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  if (type == 0) return small_linear(x, w, b);
  return quantized_linear(x, w, type, w.size(0), x.size(1), b);
}

// kernels.activation.silu_and_mul_ref, in the same two ATen ops.
at::Tensor silu_and_mul(const at::Tensor& gate_up) {
  const int64_t inner = gate_up.size(-1) / 2;
  return at::silu(gate_up.narrow(-1, 0, inner)) * gate_up.narrow(-1, inner, inner);
}

}  // namespace

// Returns the hidden states after the final norm, [T, hidden]. Weights come per layer in lists; q, k and
// v share one projection (qkv) and gate and up another (gate_up), as the model stores them. `types` holds
// each layer's qkv, o, gate_up and down weight types in that order (0: float32, else GGUF blocks).
at::Tensor decode_layers(const at::Tensor& x_in, const at::Tensor& positions, const at::Tensor& cos_sin_cache,
                         at::TensorList in_norm, at::TensorList qkv, at::TensorList qkv_bias, at::TensorList o,
                         at::TensorList post_norm, at::TensorList gate_up, at::TensorList down,
                         at::IntArrayRef types, const at::Tensor& final_norm, at::TensorList k_caches, at::TensorList v_caches,
                         const at::Tensor& slot_mapping, const at::Tensor& block_tables,
                         const at::Tensor& context_lens, double eps, double scale, int64_t num_heads,
                         int64_t num_kv_heads, int64_t head_dim) {
  const size_t layers = qkv.size();
  TORCH_CHECK(in_norm.size() == layers && o.size() == layers && post_norm.size() == layers &&
                  gate_up.size() == layers && down.size() == layers && k_caches.size() == layers &&
                  v_caches.size() == layers && (qkv_bias.empty() || qkv_bias.size() == layers) &&
                  types.size() == 4 * layers,
              "sllm_cpu: decode_layers needs one of each weight and cache per layer");
  const int64_t t = x_in.size(0);
  TORCH_CHECK(x_in.dim() == 2 && t >= 1 && t <= kSmallLinearMaxRows, "sllm_cpu: decode_layers takes 1 to ",
              kSmallLinearMaxRows, " rows");
  const std::vector<at::Tensor> biases(qkv_bias.begin(), qkv_bias.end());
  const int64_t q_size = num_heads * head_dim, kv_size = num_kv_heads * head_dim;
  at::Tensor x = x_in, residual, h;
  for (size_t i = 0; i < layers; ++i) {
    if (i == 0) {
      residual = x;
      h = rms_norm(x, in_norm[i], eps);
    } else {
      std::tie(h, residual) = fused_add_rms_norm(x, residual, in_norm[i], eps);
    }
    const int64_t* type = types.data() + 4 * i;
    const at::Tensor proj = linear(h, qkv[i], type[0], bias_at(biases, i));
    at::Tensor q = proj.narrow(1, 0, q_size).view({t, num_heads, head_dim});
    at::Tensor k = proj.narrow(1, q_size, kv_size).view({t, num_kv_heads, head_dim});
    const at::Tensor v = proj.narrow(1, q_size + kv_size, kv_size).view({t, num_kv_heads, head_dim});
    rotary_embedding(positions, q, k, cos_sin_cache);
    at::Tensor k_cache = k_caches[i], v_cache = v_caches[i];
    store_kv(k, v, k_cache, v_cache, slot_mapping);
    const at::Tensor attn =
        paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale, std::nullopt, "auto");
    x = linear(attn.view({t, q_size}), o[i], type[1]);
    std::tie(h, residual) = fused_add_rms_norm(x, residual, post_norm[i], eps);
    x = linear(silu_and_mul(linear(h, gate_up[i], type[2])), down[i], type[3]);
  }
  return std::get<0>(fused_add_rms_norm(x, residual, final_norm, eps));
}

}  // namespace sllm_cpu

TORCH_LIBRARY_FRAGMENT(sllm_cpu, m) {
  m.def(
      "decode_layers(Tensor x, Tensor positions, Tensor cos_sin_cache, Tensor[] in_norm, Tensor[] qkv, "
      "Tensor[] qkv_bias, Tensor[] o, Tensor[] post_norm, Tensor[] gate_up, Tensor[] down, int[] types, "
      "Tensor final_norm, "
      "Tensor(a!)[] k_caches, Tensor(b!)[] v_caches, Tensor slot_mapping, Tensor block_tables, "
      "Tensor context_lens, float eps, float scale, int num_heads, int num_kv_heads, int head_dim) -> Tensor");
}

TORCH_LIBRARY_IMPL(sllm_cpu, CPU, m) { m.impl("decode_layers", &sllm_cpu::decode_layers); }
