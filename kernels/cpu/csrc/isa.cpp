// The instruction-set paths (isa.h) and their ops: `set_isa` lowers the ceiling every op picks under,
// `isa` reads it back, `supported_isas` lists what the CPU runs, `resolve_isa` names the path an op
// with a given vector operand would take.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <atomic>
#include <string>
#include <vector>

#include "isa.h"

namespace sllm_cpu {
namespace {

bool detect(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  switch (isa) {
    case Isa::Generic:
      return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return detect(Isa::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return isa == Isa::Generic;  // the vector paths are x86-64 GCC code (see the *_avx2/avx512 files)
#endif
}

std::atomic<int>& ceiling_slot() {
  static std::atomic<int> slot{static_cast<int>(host_isa())};
  return slot;
}

}  // namespace

bool cpu_supports(Isa isa) {
  static const bool ok[3] = {detect(Isa::Generic), detect(Isa::Avx2), detect(Isa::Avx512)};
  return ok[static_cast<int>(isa)];
}

Isa host_isa() {
  if (cpu_supports(Isa::Avx512)) return Isa::Avx512;
  if (cpu_supports(Isa::Avx2)) return Isa::Avx2;
  return Isa::Generic;
}

Isa isa_ceiling() { return static_cast<Isa>(ceiling_slot().load(std::memory_order_relaxed)); }

void set_isa_ceiling(Isa isa) { ceiling_slot().store(static_cast<int>(isa), std::memory_order_relaxed); }

int64_t isa_width(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return 16;
    case Isa::Avx2:
      return 8;
    default:
      return 1;
  }
}

Isa pick_isa(Isa limit, int64_t n) {
  for (int i = static_cast<int>(limit); i > 0; --i) {
    const Isa isa = static_cast<Isa>(i);
    if (cpu_supports(isa) && n % isa_width(isa) == 0) return isa;
  }
  return Isa::Generic;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    default:
      return "generic";
  }
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512})
    if (name == isa_name(isa)) return isa;
  TORCH_CHECK(false, "sllm_cpu: unknown instruction-set path '", name, "' (generic, avx2 or avx512)");
}

Isa choose_isa(c10::string_view requested, int64_t n) {
  const std::string s(requested);
  if (s == "auto") return pick_isa(isa_ceiling(), n);
  const Isa isa = parse_isa(s);
  TORCH_CHECK(cpu_supports(isa), "sllm_cpu: the ", s, " path needs a CPU that runs it (this one: ",
              isa_name(host_isa()), ")");
  TORCH_CHECK(n % isa_width(isa) == 0, "sllm_cpu: the ", s, " path needs a size divisible by ", isa_width(isa),
              ", got ", n);
  return isa;
}

namespace {

void set_isa_op(c10::string_view name) {
  const std::string s(name);
  const Isa isa = s == "auto" ? host_isa() : parse_isa(s);
  TORCH_CHECK(cpu_supports(isa), "sllm_cpu: this CPU cannot run the ", s, " path (best: ", isa_name(host_isa()), ")");
  set_isa_ceiling(isa);
}

std::string isa_op() { return isa_name(isa_ceiling()); }

std::vector<std::string> supported_isas_op() {
  std::vector<std::string> out;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512})
    if (cpu_supports(isa)) out.emplace_back(isa_name(isa));
  return out;
}

std::string resolve_isa_op(int64_t n) { return isa_name(pick_isa(isa_ceiling(), n)); }

}  // namespace
}  // namespace sllm_cpu

TORCH_LIBRARY_FRAGMENT(sllm_cpu, m) {
  m.def("set_isa(str name) -> ()", &sllm_cpu::set_isa_op);
  m.def("isa() -> str", &sllm_cpu::isa_op);
  m.def("supported_isas() -> str[]", &sllm_cpu::supported_isas_op);
  m.def("resolve_isa(int n) -> str", &sllm_cpu::resolve_isa_op);
}
