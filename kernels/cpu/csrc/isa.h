// Which instruction-set path the CPU kernels take: the portable C++ one, AVX2 (+FMA, F16C) or AVX-512
// (F, BW, VL, DQ). Every op with vector paths picks one through `pick_isa`, so one setting (the
// ceiling, `SLLM_CPU_ISA` from Python) forces every op onto the same path, and each path can be tested
// and timed on any host that can run it.
//
// No torch headers here (see decode_attention.h): the per-ISA translation units include this.
#pragma once

#include <cstdint>

namespace sllm_cpu {

enum class Isa : int { Generic = 0, Avx2 = 1, Avx512 = 2 };

// The CPU can run this path.
bool cpu_supports(Isa isa);
// The best path the CPU can run.
Isa host_isa();
// The best path the kernels may take (the host's best until set_isa_ceiling lowers it).
Isa isa_ceiling();
void set_isa_ceiling(Isa isa);
// The path for an operand whose vector paths need `n` to be a multiple of their width (16 floats for
// AVX-512, 8 for AVX2): the best one at or below `limit` that the CPU runs and that divides `n`.
Isa pick_isa(Isa limit, int64_t n);
// Vector width in floats of a path (1 for the portable one).
int64_t isa_width(Isa isa);
const char* isa_name(Isa isa);

}  // namespace sllm_cpu
