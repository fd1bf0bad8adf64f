"""Counter-based Gaussian noise: Philox4x32-10 and the ziggurat method in float64.

**The generator.** Philox4x32-10 (Salmon, Moraes, Dror, Shaw, *Parallel Random Numbers: As Easy
as 1, 2, 3*, SC 2011; the Random123 library) maps a 128-bit counter (c0, c1, c2, c3) and a
64-bit key (k0, k1) to 128 random bits by ten rounds of

    (hi0, lo0) = M0 * c0,   (hi1, lo1) = M1 * c2            (32 x 32 -> 64-bit products)
    (c0, c1, c2, c3) <- (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

with M0 = 0xD2511F53, M1 = 0xCD9E8D57, the key bumped by the Weyl constants (0x9E3779B9,
0xBB67AE85) before every round after the first. Distinct (key, counter) pairs give independent
streams (it passes TestU01's BigCrush with 3 rounds of margin), any counter is computed alone,
and the loop over counters vectorises: the noise of a model and step costs no state and no
sequential draw. tests/test_philox.py checks Random123's published known-answer vectors.

**Key and counters of the DP-SGD noise** (docs/design.md §12.3). A noise stream of the engine is
a ``torch.Generator`` seeded with a 63-bit integer s (:func:`audit.training.trials.run_shard`: ``s
= torch_seed(seed_sequence(seed, cell, shard, side, "noise"))``, :mod:`audit.core.seeding`) that
covers ``rows`` models. Its Philox key is (k0, k1) = (s mod 2^32, s div 2^32) (:func:`noise_key`);
the noise of model row r of the stream at step t, parameters j = 0..P-1, comes from the counters

    (q, t, r, 0),  q = 0 .. Q - 1, Q = ceil(P / 4)   (the main draw: variate j takes word
                                                      j div Q of counter j mod Q)
    (j, t, r, a),  a = 1, 2, ...                     (variate j's further attempts, below)

and variate j is the noise of the parameter at position j of the engine's class-major layout
(:func:`audit.training.compiled.kernel_order`: class j div (D + 1), input row j mod (D + 1) of
[W; c]; the compiled kernel reads each class's noise contiguously). So a training's noise is a
function of its own address (audit seed, cell, shard, side, row) and of nothing else: not of the
shard's size, the block it is computed in, the number of workers, nor the order of computation.

**The transform: the ziggurat** (Marsaglia and Tsang, *The Ziggurat Method for Generating
Random Variables*, J. Stat. Software 5(8), 2000; with the layer and the abscissa taken from
disjoint bits, as Doornik, *An Improved Ziggurat Method to Generate Normal Random Samples*,
2005, recommends). The area under f(x) = exp(-x^2 / 2) is covered by N = 256 layers of equal
area v: layer i >= 1 is the rectangle [-x_i, x_i] x [f(x_i), f(x_{i+1})] (x_1 = r > x_2 > ... >
x_255 > x_256 = 0, f(x_256) = 1), layer 0 the base [-r, r] x [0, f(r)] with the two tails |x| >
r, of width x_0 = v / f(r) (:func:`ziggurat_tables`: r = 3.65415288536101 solves "the top
layer has area v" to float64 precision). One 32-bit word w gives the layer i = w mod 256 (its
low 8 bits) and the abscissa x = u x_i with u = (s + 1/2) 2^-23, s the signed 24-bit integer of
its high bits (u uniform on a grid of 2^24 points of (-1, 1)):

- |x| < x_{i+1} (the layer's core, under the curve; 98.5% of the words): z = x;
- else, layer 0 (0.026%): a variate of the tail |x| > r, exactly (Marsaglia 1964): x' = -ln(U1)
  / r, y' = -ln(U2) with U1, U2 uniform from 64 bits each, until 2 y' > x'^2; z = sign(s) (r + x');
- else, layer i >= 1 (the wedge): y = f(x_i) + U (f(x_{i+1}) - f(x_i)); z = x if y < f(x), else
  a new attempt from a new word.

**Arithmetic.** The main loop works in float32 (eight words per AVX2 vector instead of four
in float64): x = (2 s + 1) (x_i 2^-24), where 2 s + 1 is exact in float32 (|2 s + 1| < 2^24)
and x_i 2^-24 is rounded to float32 once (a table), the product rounded, then multiplied by std
rounded to float32: three roundings, so the output is within 1.8e-7 relative (3 x 2^-24) of std
z, and its distribution function within max_x x phi(x) 1.8e-7 = 4.3e-8 of the exact one's; the
core test |x| < x_{i+1} compares float32 values (x_{i+1} rounded): a word within 1.2e-7
relative of a core's edge may be sent to the wedge test, which accepts it with probability
within ~1e-7 of 1, or accepted where the wedge test would have accepted it with that
probability. The slow paths (tail, wedge) are float64, their variates rounded once to float32.
Accepted points are uniform under the curve, so z
is exactly normal up to the resolution of the main word: its abscissae lie on a grid of spacing
x_i 2^-23 <= 4.7e-7 (x_0 = 3.911; 24 random bits, coarser than float32's spacing near 0), so the
output's distribution function is within 4.7e-7 / sqrt(2 pi) = 1.9e-7 of the normal's everywhere
(the law tests see 1e-3); the tails come from 64-bit uniforms: |z| reaches r + 64 ln 2 / r = 15.8
std, beyond any float32 draw from a 24-bit uniform (torch's ``normal_`` stops at 5.77).

The main loop (:func:`_ziggurat_row`) is two table reads, a product and a comparison per
variate, branch-free (it vectorises); the 1.5% of variates outside the cores, flagged by it, are
redone by a scalar function (:func:`_slow_variate`), which draws their further words from the
counters (j, t, r, a), a = 1, 2, ...: counter a gives the wedge's U of attempt a - 1 (word 1)
and the word of attempt a (word 0); in the tail, each try takes all four words of the next
counter (two 64-bit uniforms). Every word is used at most once, and a variate's words depend on
its address only.

The functions below are plain Python that numba compiles (:mod:`audit.training.compiled`); run
uncompiled they give the same numbers.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "LAYERS",
    "MAIN",
    "PHILOX_ROUNDS",
    "STREAM_VERSION",
    "gaussian_row",
    "noise_key",
    "philox4x32",
    "ziggurat_tables",
]

PHILOX_ROUNDS = 10
"""Rounds of Philox4x32 (Random123's default, 3 more than the fewest that pass BigCrush)."""

STREAM_VERSION = "philox4x32-10-ziggurat256-f32-classmajor"
"""The noise stream of the ``compiled_philox`` route (generator, transform and the parameter each
variate goes to), recorded in every shard's fingerprint
(:func:`audit.training.compiled.default_routes`): shards of another stream are never reused. Its
versions: the Box-Muller transform (issue 25's first), ``philox4x32-10-ziggurat256`` (the ziggurat
in float64, variate j to the flat parameter j), this one (the ziggurat's core in float32, variate
j to the kernel's class-major position j)."""

MAIN = 0
"""Last counter word of the main draw (one word per variate)."""

LAYERS = 256
"""Layers of the ziggurat (the low 8 bits of a word)."""

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint32(0x9E3779B9)
_W1 = np.uint32(0xBB67AE85)
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_LAYER_BITS = np.uint32(LAYERS - 1)
_ABSCISSA_SHIFT = np.int32(8)


def _density(x: float) -> float:
    """f(x) = exp(-x^2 / 2), the unnormalised standard normal density."""
    return math.exp(-0.5 * x * x)


def _layer_edges(r: float) -> tuple[list[float], float]:
    """x_1 = r, ..., x_{N-1} of the ziggurat with base r, and v = r f(r) + int_r^inf f: each
    layer's x_{i+1} = f^-1(f(x_i) + v / x_i); stops early (empty list) when a layer overshoots
    f = 1."""
    area = r * _density(r) + math.sqrt(math.pi / 2) * math.erfc(r / math.sqrt(2))
    edges = [r]
    for _ in range(LAYERS - 2):
        height = _density(edges[-1]) + area / edges[-1]
        if height >= 1.0:
            return [], area
        edges.append(math.sqrt(-2.0 * math.log(height)))
    return edges, area


def _top_excess(r: float) -> float:
    """f(x_{N-1}) + v / x_{N-1} - 1: zero when the top layer [0, x_{N-1}] x [f(x_{N-1}), 1] has
    area v; positive (too high) for r below the root, negative above."""
    edges, area = _layer_edges(r)
    if not edges:
        return 1.0
    return _density(edges[-1]) + area / edges[-1] - 1.0


def ziggurat_tables() -> tuple[float, float, np.ndarray, np.ndarray]:
    """(r, v, x, f): the base r and layer area v of the 256-layer ziggurat, solved by bisection
    on :func:`_top_excess` to float64 precision, x (257,) = (x_0 = v / f(r), x_1 = r, ..., x_255,
    x_256 = 0) and f (257,) = f(x_i) (f(x_256) = 1)."""
    low, high = 3.0, 4.5
    for _ in range(200):
        middle = 0.5 * (low + high)
        if _top_excess(middle) > 0:
            low = middle
        else:
            high = middle
    edges, area = _layer_edges(high)
    x = np.array([area / _density(high), *edges, 0.0])
    heights = np.array([_density(value) for value in x])
    heights[-1] = 1.0
    return high, area, x, heights


_ZIG_R, _ZIG_V, _ZIG_X, _ZIG_F = ziggurat_tables()
_ZIG_SCALED = _ZIG_X[:LAYERS] * 2.0**-23
"""x_i 2^-23: the abscissa of layer i is (s + 1/2) x_i 2^-23 for the word's signed 24 bits s."""
_ZIG_CORE = _ZIG_X[1:].copy()
"""x_{i+1}: the half-width of layer i's core (under the curve)."""
_ZIG_STEP32 = (_ZIG_X[:LAYERS] * 2.0**-24).astype(np.float32)
"""x_i 2^-24 rounded to float32: the main loop's abscissa is (2 s + 1) x_i 2^-24 in float32."""
_ZIG_CORE32 = _ZIG_CORE.astype(np.float32)
"""x_{i+1} rounded to float32: the main loop's core test."""


def noise_key(seed: int) -> np.ndarray:
    """The Philox key (k0, k1) uint32 of a noise stream seeded with ``seed`` (a torch
    generator's ``initial_seed()``, 0 <= seed < 2^64): its low and high 32-bit words."""
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"noise key: seed={seed} must be in [0, 2^64)")
    return np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32)



def _philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of the counter (c0, c1, c2, c3) under the key (k0, k1), all uint32."""
    for r in range(PHILOX_ROUNDS):
        if r > 0:
            k0 = np.uint32(k0 + _W0)
            k1 = np.uint32(k1 + _W1)
        p0 = _M0 * np.uint64(c0)
        p1 = _M1 * np.uint64(c2)
        n0 = np.uint32(p1 >> _SHIFT32) ^ c1 ^ k0
        n2 = np.uint32(p0 >> _SHIFT32) ^ c3 ^ k1
        c1 = np.uint32(p1 & _LOW)
        c3 = np.uint32(p0 & _LOW)
        c0 = n0
        c2 = n2
    return c0, c1, c2, c3


def _unit32(word):
    """(word + 1/2) 2^-32, uniform on (0, 1) from a uint32 word."""
    return (np.float64(word) + 0.5) * 2.0**-32


def _unit64(high, low):
    """(high 2^32 + low + 1/2) 2^-64 from two uint32 words, rounded once to float64: in (0, 1]
    (1 only by rounding, probability 2^-54), at least 2^-65."""
    return (np.float64(high) + (np.float64(low) + 0.5) * 2.0**-32) * 2.0**-32


def _abscissa(word):
    """(layer, x) of a word: its low 8 bits and (s + 1/2) x_layer 2^-23, s = its high 24 bits as
    a signed integer (arithmetic shift of the word read as int32)."""
    layer = word & _LAYER_BITS
    signed = np.float64(np.int32(word) >> _ABSCISSA_SHIFT) + 0.5
    return layer, signed * _ZIG_SCALED[layer]


def _slow_variate(j, word, k0, k1, c1, c2):
    """The ziggurat variate (unit variance, float64) of variate j whose main word ``word`` fell
    outside its layer's core: the tail (layer 0) or the wedge test, with further attempts from the
    counters (j, c1, c2, a), a = 1, 2, ... (module docstring)."""
    attempt = np.uint32(1)
    c0 = np.uint32(j)
    while True:
        e0, e1, e2, e3 = _philox(c0, c1, c2, attempt, k0, k1)
        layer, x = _abscissa(word)
        if abs(x) < _ZIG_CORE[layer]:
            return x
        if layer == 0:  # the tail |x| > r (Marsaglia 1964), one try per counter
            while True:
                tail = -math.log(_unit64(e0, e1)) / _ZIG_R
                height = -math.log(_unit64(e2, e3))
                if 2.0 * height > tail * tail:
                    return math.copysign(_ZIG_R + tail, x)
                attempt = np.uint32(attempt + np.uint32(1))
                e0, e1, e2, e3 = _philox(c0, c1, c2, attempt, k0, k1)
        low = _ZIG_F[layer]
        if low + _unit32(e1) * (_ZIG_F[layer + 1] - low) < _density(x):
            return x
        word = e0
        attempt = np.uint32(attempt + np.uint32(1))


def _philox_words(words, k0, k1, c1, c2):
    """The main draw of (key, step c1, row c2) into ``words`` (4Q,) uint32: word m of counter
    (q, c1, c2, 0) at words[m Q + q], q = 0 .. Q - 1 (contiguous stores: the loop vectorises)."""
    counters = words.shape[0] // 4
    for q in range(counters):
        w0, w1, w2, w3 = _philox(np.uint32(q), c1, c2, np.uint32(MAIN), k0, k1)
        words[q] = w0
        words[q + counters] = w1
        words[q + 2 * counters] = w2
        words[q + 3 * counters] = w3


def _ziggurat_row(out, words, flags, k0, k1, c1, c2, std):
    """out[j] <- std z_j in float32, z_j the ziggurat variate of words[j]: first every word's core
    abscissa in float32 (module docstring), flagging in ``flags`` (uint8, zero beyond len(out), a
    multiple of 8 long) the words outside their core (a branch-free loop that vectorises, eight
    words per AVX2 vector), then the flagged variates (1.5%) by :func:`_slow_variate` in float64,
    found eight flags at a time."""
    scale = np.float32(std)
    for j in range(out.shape[0]):
        word = words[j]
        layer = word & _LAYER_BITS
        # 2 s + 1 from the signed high 24 bits s: exact in float32 (|2 s + 1| < 2^24)
        odd = np.float32(np.int32(word) >> _ABSCISSA_SHIFT) * np.float32(2.0) + np.float32(1.0)
        x = odd * _ZIG_STEP32[layer]
        flags[j] = abs(x) >= _ZIG_CORE32[layer]
        out[j] = scale * x
    chunks = flags.view(np.uint64)
    for c in range(chunks.shape[0]):
        if chunks[c] != 0:
            for j in range(8 * c, 8 * c + 8):
                if flags[j]:
                    out[j] = np.float32(std * _slow_variate(j, words[j], k0, k1, c1, c2))


def _gaussian_row(out, words, flags, k0, k1, step, row, std):
    """``out`` (P,) float32 <- P independent N(0, std^2) variates of (key, step, row), with
    scratch ``words`` (4Q,) uint32, Q = ceil(P / 4), and ``flags`` (8 ceil(P / 8),) uint8 zeros:
    the Philox words of the main draw (:func:`_philox_words`), then the ziggurat
    (:func:`_ziggurat_row`). Separate compiled functions: the Philox loop vectorises alone."""
    c1 = np.uint32(step)
    c2 = np.uint32(row)
    _philox_words(words, k0, k1, c1, c2)
    _ziggurat_row(out, words, flags, k0, k1, c1, c2, std)


def _gaussian_rows(out, keys, rows, step, std):
    """Row i of ``out`` (K, P) float32 <- :func:`_gaussian_row` of key ``keys[i]`` (K, 2) uint32,
    row ``rows[i]`` and ``step``."""
    size = out.shape[1]
    words = np.empty(4 * ((size + 3) // 4), np.uint32)
    flags = np.zeros(8 * ((size + 7) // 8), np.uint8)
    for i in range(out.shape[0]):
        _gaussian_row(out[i], words, flags, keys[i, 0], keys[i, 1], step, rows[i], std)


def _variates(words, key, c1, c2, std, out):
    """The transform of given main words, as the generator applies it: out[j] <- the variate j
    of ``words`` (n,) under ``key`` at (step c1, row c2) (slow variates from the counters (j, c1,
    c2, a)). For tests of the law on words conditioned on the slow paths."""
    flags = np.zeros(8 * ((out.shape[0] + 7) // 8), np.uint8)
    _ziggurat_row(out, words, flags, key[0], key[1], np.uint32(c1), np.uint32(c2), std)


def _philox_block(counters, key, out):
    """out[i] <- Philox4x32-10 of counters[i] (n, 4) under key (2,), all uint32."""
    for i in range(counters.shape[0]):
        w0, w1, w2, w3 = _philox(
            counters[i, 0], counters[i, 1], counters[i, 2], counters[i, 3], key[0], key[1]
        )
        out[i, 0] = w0
        out[i, 1] = w1
        out[i, 2] = w2
        out[i, 3] = w3


def philox4x32(counters: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox4x32-10 (uncompiled, a reference for tests): (n, 4) uint32 counters, (2,) uint32 key ->
    (n, 4) uint32 random words; :func:`audit.training.compiled.philox4x32` is the compiled one."""
    counters = np.atleast_2d(np.asarray(counters, dtype=np.uint32))
    out = np.empty_like(counters)
    with np.errstate(over="ignore"):
        _philox_block(counters, np.asarray(key, dtype=np.uint32), out)
    return out


def gaussian_row(key: np.ndarray, step: int, row: int, size: int, std: float = 1.0) -> np.ndarray:
    """The noise (size,) float32 of model ``row`` at ``step`` under ``key`` (uncompiled, a
    reference for tests; :func:`audit.training.compiled.gaussian_rows` is the compiled one)."""
    out = np.empty((1, size), np.float32)
    key = np.asarray(key, dtype=np.uint32).reshape(1, 2)
    with np.errstate(over="ignore"):
        _gaussian_rows(out, key, np.array([row], np.uint32), step, float(std))
    return out[0]
