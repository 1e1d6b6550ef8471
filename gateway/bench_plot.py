"""TTFT and TPOT distributions of each benchmark target, side by side, as one PNG."""

from pathlib import Path


def plot_distributions(summaries, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: benchmarks run on headless machines
    import matplotlib.pyplot as plt

    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    for s in summaries:
        for ax, values in ((ax_ttft, s.ttfts()), (ax_tpot, s.tpots())):
            if values:
                ax.hist([v * 1000 for v in values], bins=30, alpha=0.5, label=s.name)
    ax_ttft.set(title="Time to first token", xlabel="ms", ylabel="requests")
    ax_tpot.set(title="Time per output token", xlabel="ms", ylabel="requests")
    for ax in (ax_ttft, ax_tpot):
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
