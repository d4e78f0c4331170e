"""Reads the report.yaml files of bench/compress.sh's runs and prints its tables.

    report.py linears RUN_DIR...    one row per (layer size, method, batch): Kiln's uncompressed
                                    and compressed latency, the speedup, and PyTorch's own fp32
                                    F.linear timed here in the same way
    report.py mnist BASELINE RUN... accuracy before/after, weight bytes, batch-256 latency
"""
import statistics
import sys
import time

import yaml


def load(d):
    with open(f"{d}/report.yaml") as f:
        return yaml.safe_load(f)


def torch_linear_ms(n, batch, rounds=15):
    import torch

    torch.manual_seed(0)
    w = torch.randn(n, n) / n**0.5
    b = torch.randn(n) / n**0.5
    x = torch.randn(batch, n)
    with torch.no_grad():
        for _ in range(2):
            torch.nn.functional.linear(x, w, b)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            torch.nn.functional.linear(x, w, b)
            times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def linears(dirs):
    print(f"{'layer':<11} {'method':<34} {'batch':>5} {'fp32 ms':>9} {'after ms':>9} {'speedup':>8} {'torch fp32 ms':>14}")
    for d in dirs:
        r = load(d)
        c = r["compression"]
        layer = c["layers"][0]
        n, k = layer["shape_before"]
        for lat in c["latency"]:
            before, after = lat["before_ms"], lat["after_ms"]
            speed = before / after
            verdict = f"{speed:.2f}x" if speed >= 1 else f"{speed:.2f}x (slower)"
            ref = torch_linear_ms(n, lat["batch"])
            print(f"{n}x{k:<6} {layer['method']:<34} {lat['batch']:>5} {before:>9.3f} {after:>9.3f} {verdict:>8} {ref:>14.3f}")


def mnist(base, dirs):
    b = load(base)
    acc0 = b["val"]["accuracy"]
    print(f"baseline ({base.split('/')[-1]}): val accuracy {100 * acc0:.2f}%")
    print(f"{'run':<28} {'acc before':>10} {'acc after':>10} {'vs baseline':>12} {'bytes x':>8} {'b256 before':>12} {'b256 after':>11} {'speedup':>8}")
    for d in dirs:
        r = load(d)
        c = r["compression"]
        before = c["val"]["before"]["accuracy"]
        after = c["val"]["after"]["accuracy"]
        ratio = c["bytes_before"] / c["bytes_after"]
        lat = [l for l in c["latency"] if l["batch"] == 256][0]
        print(
            f"{d.split('/')[-1]:<28} {100 * before:>9.2f}% {100 * after:>9.2f}% {100 * (after - acc0):>+11.2f}p "
            f"{ratio:>8.2f} {lat['before_ms']:>11.3f}ms {lat['after_ms']:>10.3f}ms {lat['before_ms'] / lat['after_ms']:>7.2f}x"
        )


if __name__ == "__main__":
    if sys.argv[1] == "linears":
        linears(sys.argv[2:])
    else:
        mnist(sys.argv[2], sys.argv[3:])
