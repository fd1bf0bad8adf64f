"""Counter-based Gaussian noise: Philox4x32-10 and an exact Box-Muller transform in float64.

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

**Key and counter of the DP-SGD noise** (docs/design.md §12.3). A noise stream of the engine is a
``torch.Generator`` seeded with a 63-bit integer s (:func:`audit.training.trials.run_shard`: ``s =
torch_seed(seed_sequence(seed, cell, shard, side, "noise"))``, :mod:`audit.core.seeding`) that
covers ``rows`` models. Its Philox key is (k0, k1) = (s mod 2^32, s div 2^32) (:func:`noise_key`);
the noise of model row r of the stream at step t, parameters p = 0..P-1, comes from the counters

    (q, t, r, 0),  q = 0 .. ceil(P / 4) - 1      (the main draw: four variates per counter)
    (q, t, r, 1)                                  (extra bits for the rare far tail, below)

so a training's noise is a function of its own address (audit seed, cell, shard, side, row)
and of nothing else: not of the shard's size, the block it is computed in, the number of
workers, nor the order of computation.

**The transform** (:func:`_box_muller`). Each counter gives two pairs of 32-bit words (a, b);
per pair the Box-Muller transform (Box and Muller 1958) of u1 in (0, 1] and an angle theta
uniform on [0, 2 pi):

    r = std sqrt(-2 ln u1),   (z1, z2) = (r cos theta, r sin theta),

computed in float64 and rounded once to float32. u1 = (a + 1/2) 2^-32; when a < 2^20 (u1 <
2^-12, r > 4.08 std, probability 2^-12) the pair takes 32 more bits e from the counter with last
word 1: u1 = (a 2^32 + e + 1/2) 2^-64, so u1 has at least 20 significant random bits everywhere
(relative resolution 2^-20) and |z| reaches 9.49 std (u1 >= 2^-65; the normal mass beyond is
2e-21), where float32 noise from a 24-bit uniform stops at 5.77 std (torch's ``normal_``: u1 =
1 - k 2^-24 >= 2^-24). The angle word b gives the octant by its top three bits (two signs and a
swap of cos and sin: the eight reflections of the dihedral group map [0, pi/4) onto the eight
octants, each uniformly) and phi = (pi/4)(f + 1/2) 2^-29 from its low 29 bits f. ln is
evaluated by the exponent split u1 = m 2^e (m in [sqrt(1/2), sqrt(2))) and the series
ln m = 2 atanh(s), s = (m - 1)/(m + 1), |s| <= 0.172 (9 terms: truncation below 1e-15); sin
and cos of phi in [0, pi/4) by their Taylor series to degree 13 and 14 (truncation below 3e-14
relative): float64 to about 1e-13 relative, so the float32 rounding (relative 6e-8) is the only
visible error. Branch-free (bit masks for the octant and the exponent) so that the loop over
counters vectorises; the rare tail pairs are redone in a second, scalar loop.

The functions below are plain Python that numba compiles (:mod:`audit.training.compiled`); run
uncompiled they give the same numbers (the bit casts :func:`_float64_bits` and
:func:`_bits_float64` are then numpy views).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAIN", "PHILOX_ROUNDS", "TAIL", "TAIL_WORD", "gaussian_row", "noise_key", "philox4x32"]

PHILOX_ROUNDS = 10
"""Rounds of Philox4x32 (Random123's default, 3 more than the fewest that pass BigCrush)."""

MAIN = 0
"""Last counter word of the main draw (four variates per counter)."""

TAIL = 1
"""Last counter word of the extra bits of far-tail pairs (u1 < 2^-12)."""

TAIL_WORD = np.uint32(1 << 20)
"""A pair whose first word is below this (u1 < 2^-12) takes 32 more bits for u1."""

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint32(0x9E3779B9)
_W1 = np.uint32(0xBB67AE85)
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_MANTISSA = np.uint64(0x000FFFFFFFFFFFFF)
_SQRT2_MANTISSA = np.uint64(0x6A09E667F3BCD)  # the mantissa bits of sqrt(2)
_SIGN = np.uint64(1) << np.uint64(63)
_LN2 = 0.6931471805599453
_PHI_STEP = math.pi / 4 / 2**29


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


def _float64_bits(value):
    """The IEEE 754 bits of a float64 (compiled: an LLVM bitcast)."""
    return np.float64(value).view(np.uint64)


def _bits_float64(bits):
    """The float64 of IEEE 754 bits (compiled: an LLVM bitcast)."""
    return np.uint64(bits).view(np.float64)


def _log_unit(u):
    """ln u for float64 u in (0, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)) from the bits
    (branch-free), ln u = e ln 2 + 2 atanh(s), s = (m - 1)/(m + 1), by the series
    2 s sum_k s^(2k) / (2k + 1) to k = 8 (|s| <= 0.1716, s^2 <= 0.0295: the first term left out,
    0.0295^9 / 19, is below 1e-15 relative)."""
    bits = _float64_bits(u)
    mantissa = bits & _MANTISSA
    above = np.uint64(mantissa > _SQRT2_MANTISSA)  # m >= sqrt 2: halve m, raise e
    exponent = np.float64(np.int64(bits >> np.uint64(52)) + np.int64(above) - 1023)
    m = _bits_float64(mantissa | ((np.uint64(1023) - above) << np.uint64(52)))
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    p = 1.0 / 17.0
    p = p * z + 1.0 / 15.0
    p = p * z + 1.0 / 13.0
    p = p * z + 1.0 / 11.0
    p = p * z + 1.0 / 9.0
    p = p * z + 1.0 / 7.0
    p = p * z + 1.0 / 5.0
    p = p * z + 1.0 / 3.0
    p = p * z + 1.0
    return exponent * _LN2 + 2.0 * s * p


def _sin_cos(x):
    """(sin x, cos x) for x in [0, pi/4] by the Taylor series to degree 13 and 14 (the first terms
    left out, x^15/15! and x^16/16!, are below 2.1e-14 and 1.1e-15 there: 3e-14 of sin pi/4)."""
    z = x * x
    s = 1.0 / 6227020800.0
    s = s * z - 1.0 / 39916800.0
    s = s * z + 1.0 / 362880.0
    s = s * z - 1.0 / 5040.0
    s = s * z + 1.0 / 120.0
    s = s * z - 1.0 / 6.0
    c = -1.0 / 87178291200.0
    c = c * z + 1.0 / 479001600.0
    c = c * z - 1.0 / 3628800.0
    c = c * z + 1.0 / 40320.0
    c = c * z - 1.0 / 720.0
    c = c * z + 1.0 / 24.0
    c = c * z - 0.5
    return x + x * z * s, 1.0 + z * c


def _box_muller(u1, angle, std):
    """(z1, z2) float32: r = std sqrt(-2 ln u1) times (cos, sin) of the uniform angle coded by
    the uint32 ``angle`` (module docstring: octant from its top three bits, phi from the rest)."""
    radius = std * math.sqrt(-2.0 * _log_unit(u1))
    phi = (np.float64(np.int32(angle & np.uint32(0x1FFFFFFF))) + 0.5) * _PHI_STEP
    sin, cos = _sin_cos(phi)
    bits_sin = _float64_bits(radius * sin)
    bits_cos = _float64_bits(radius * cos)
    word = np.uint64(angle)
    swap = np.uint64(0) - ((word >> np.uint64(29)) & np.uint64(1))  # all ones: swap cos and sin
    first = (bits_sin & swap) | (bits_cos & ~swap)
    second = (bits_cos & swap) | (bits_sin & ~swap)
    first ^= (word << np.uint64(33)) & _SIGN  # bit 30: the sign of z1
    second ^= (word << np.uint64(32)) & _SIGN  # bit 31: the sign of z2
    return np.float32(_bits_float64(first)), np.float32(_bits_float64(second))


def _main_u1(word):
    """u1 = (word + 1/2) 2^-32 for a uint32 word (exact in float64)."""
    return (np.float64(np.int32(word ^ np.uint32(0x80000000))) + 2147483648.5) * 2.0**-32


def _tail_u1(word, extra):
    """u1 = (word 2^32 + extra + 1/2) 2^-64 for word < 2^20 (exact: fewer than 53 bits)."""
    whole = (np.uint64(word) << _SHIFT32) | np.uint64(extra)
    return (np.float64(np.int64(whole)) + 0.5) * 2.0**-64


def _philox_words(words, k0, k1, c1, c2):
    """The main draw of (key, step c1, row c2): the words of counters q = 0 .. Q - 1 (Q =
    len(words) / 4) into ``words``: first words of the pairs (a0 of every counter, then a1),
    then their angle words (b0, then b1); returns the smallest first word (a far-tail pair when
    below :data:`TAIL_WORD`)."""
    counters = words.shape[0] // 4
    pairs = 2 * counters
    lowest = np.uint32(0xFFFFFFFF)
    for q in range(counters):
        a0, b0, a1, b1 = _philox(np.uint32(q), c1, c2, np.uint32(MAIN), k0, k1)
        words[q] = a0
        words[q + counters] = a1
        words[pairs + q] = b0
        words[pairs + q + counters] = b1
        lowest = min(lowest, min(a0, a1))
    return lowest


def _box_muller_pairs(out, words, std):
    """Pair j = (words[j], words[j + 2Q]) -> out[j], out[j + P/2], for j < P/2."""
    half = out.shape[0] // 2
    pairs = words.shape[0] // 2
    for j in range(half):
        out[j], out[j + half] = _box_muller(_main_u1(words[j]), words[pairs + j], std)


def _tail_pairs(out, words, k0, k1, c1, c2, std):
    """The far-tail pairs (first word < 2^20) redone with u1 from 64 bits: the first word
    and word 0 (pair of a0) or 1 (pair of a1) of the counter's tail draw (q, c1, c2, TAIL)."""
    half = out.shape[0] // 2
    counters = words.shape[0] // 4
    pairs = 2 * counters
    for j in range(half):
        if words[j] < TAIL_WORD:
            q = j if j < counters else j - counters
            e0, e1, _, _ = _philox(np.uint32(q), c1, c2, np.uint32(TAIL), k0, k1)
            tail = _tail_u1(words[j], e0 if j < counters else e1)
            out[j], out[j + half] = _box_muller(tail, words[pairs + j], std)


def _gaussian_row(out, words, k0, k1, step, row, std):
    """``out`` (P,) float32, P even <- P independent N(0, std^2) variates of (key, step, row),
    with ``words`` (4Q,) uint32 scratch, Q = ceil(P / 4): the Philox words of the Q counters
    (:func:`_philox_words`), the Box-Muller transform of pair j into out[j] and out[j + P/2]
    (:func:`_box_muller_pairs`), the far-tail pairs redone (:func:`_tail_pairs`). Separate
    compiled functions: each of the first two loops vectorises alone (inlined into one
    function they did not, and ran 2.5x slower)."""
    c1 = np.uint32(step)
    c2 = np.uint32(row)
    if _philox_words(words, k0, k1, c1, c2) < TAIL_WORD:
        _box_muller_pairs(out, words, std)
        _tail_pairs(out, words, k0, k1, c1, c2, std)
    else:
        _box_muller_pairs(out, words, std)


def _gaussian_rows(out, keys, rows, step, std):
    """Row i of ``out`` (K, P) float32 <- :func:`_gaussian_row` of key ``keys[i]`` (K, 2) uint32,
    row ``rows[i]`` and ``step`` (for an odd P, the first P of the P + 1 variates)."""
    size = out.shape[1]
    even = size + size % 2
    words = np.empty(4 * ((even // 2 + 1) // 2), np.uint32)
    buffer = np.empty(even, np.float32)
    for i in range(out.shape[0]):
        if size == even:
            _gaussian_row(out[i], words, keys[i, 0], keys[i, 1], step, rows[i], std)
        else:
            _gaussian_row(buffer, words, keys[i, 0], keys[i, 1], step, rows[i], std)
            for p in range(size):
                out[i, p] = buffer[p]


def _transform(first, extra, angle, std, out):
    """The transform of given words, as the generator applies it: pair i (first word, extra
    word, angle word) -> out[0, i], out[1, i] (u1 from the first word, or with the extra word
    too when the first is below :data:`TAIL_WORD`). For tests of the law in the far tail."""
    for i in range(first.shape[0]):
        if first[i] < TAIL_WORD:
            u1 = _tail_u1(first[i], extra[i])
        else:
            u1 = _main_u1(first[i])
        out[0, i], out[1, i] = _box_muller(u1, angle[i], std)


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
