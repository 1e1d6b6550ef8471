"""The benchmarks: code that prints numbers, kept out of the packages that serve (engine, kernels, gateway,
integrations), which never import it. `sllm bench serve|offline|json|kernels|lora` register themselves from
here (engine/cli.py); every one prints the shared header of benchmarks/harness.py first."""
