"""`sllm bench offline`'s arithmetic: the FLOPs a token costs, counted from the served weights, equal the
count from the model's config (SmolLM2-135M: ~270 MFLOP, the issue's figure), and the efficiency line
names the path's peak."""

from benchmarks.offline import Row, _print_efficiency, matmul_flops_per_token
from engine import LLM


def test_flops_per_token_and_efficiency_line(capsys):
    llm = LLM(num_kv_blocks=16)
    c = llm.engine.model_config
    head = c.head_dim
    intermediate = llm.engine.runner.model.weights["model.layers.0.down"].shape[1]
    per_layer = c.hidden_size * head * 2 * (c.num_attention_heads + c.num_key_value_heads)
    per_layer += 3 * c.hidden_size * intermediate
    want = 2 * (c.num_hidden_layers * per_layer + c.vocab_size * c.hidden_size)
    flops = matmul_flops_per_token(llm.engine.runner.model.weights)
    assert flops == want and 260e6 < flops < 280e6
    _print_efficiency([Row("hf", 8, 4, 400, 2.0), Row("sllm[auto]", 16, 4, 512, 1.0)], flops)
    line = capsys.readouterr().out
    assert "sllm[auto] at max_num_seqs 16: 137.7 GFLOP/s (269 MFLOP a token)" in line and "of the path's" in line
