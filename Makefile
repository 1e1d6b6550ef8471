.PHONY: install serve test
install:
	bash scripts/install.sh
serve: install
	.venv/bin/sllm serve
test:
	bash scripts/test.sh
