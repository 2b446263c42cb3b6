"""Traces: reading, zero-copy columns, building from arrays, writing, and parse errors."""

import numpy as np
import pytest

import moepolicy as mp


def test_read_and_shape(trace):
    assert trace.num_layers == 24 and trace.num_experts == 32 and trace.top_k == 8
    assert trace.num_rows == len(trace) == 8496
    assert trace.experts.shape == (trace.num_rows, 8) and trace.experts.dtype == np.uint16
    assert trace.weights.dtype == np.float32 and trace.layer.dtype == np.uint16
    assert trace.request.dtype == trace.step.dtype == trace.position.dtype == np.uint32
    assert trace.phase.dtype == np.uint8 and set(np.unique(trace.phase)) <= {0, 1}
    assert trace.scores.shape == (trace.num_rows, 0) and not trace.has_scores
    assert len(trace.request_names) == trace.request.max() + 1
    assert "canonical" in mp.detect_trace_format(str(trace_path_of()))


def trace_path_of():
    from conftest import BUNDLED

    return BUNDLED


@pytest.mark.parametrize("column", ["request", "step", "position", "layer", "phase", "experts", "weights", "scores"])
def test_columns_are_read_only_views(trace, column):
    a = getattr(trace, column)
    b = getattr(trace, column)
    assert not a.flags.writeable
    if a.size:  # (a trace without scores has an empty scores column: nothing to share)
        assert a.base is trace and not a.flags.owndata  # the array keeps the trace alive
    assert a.size == 0 or np.shares_memory(a, b)  # both views are the trace's memory: no copy
    if a.size:
        with pytest.raises(ValueError):
            a.flat[0] = 1


def test_view_outlives_the_name(trace_path):
    experts = mp.read_trace(trace_path).experts  # the trace object is only referenced by the view
    import gc

    gc.collect()
    assert experts.shape[1] == 8 and int(experts.max()) < 32


def test_from_arrays_round_trip(trace, tmp_path):
    # Rows given in reverse order: the trace sorts them.
    rev = slice(None, None, -1)
    t = mp.Trace.from_arrays(trace.experts[rev], trace.weights[rev], trace.layer[rev], trace.step[rev],
                             trace.request[rev], trace.phase[rev], position=trace.position[rev],
                             num_layers=trace.num_layers, num_experts=trace.num_experts,
                             request_names=trace.request_names, model=trace.model)
    for c in ("request", "step", "position", "layer", "phase", "experts", "weights"):
        assert np.array_equal(getattr(t, c), getattr(trace, c)), c
    path = tmp_path / "copy.mtrace"
    t.write_canonical(path)
    back = mp.read_trace(path)
    assert np.array_equal(back.experts, trace.experts) and back.model == trace.model
    mp.write_canonical(back, str(path))
    assert mp.read_trace(str(path)).num_rows == trace.num_rows


def test_from_arrays_defaults_and_torch_like_inputs():
    class TensorLike:  # what a CPU torch tensor offers numpy
        def __init__(self, a):
            self.a = np.asarray(a)

        def __array__(self, dtype=None):
            return self.a if dtype is None else self.a.astype(dtype)

    t = mp.Trace.from_arrays(TensorLike([[0, 1], [2, 3], [1, 2]]), TensorLike([[0.5, 0.5]] * 3),
                             [0, 0, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1])
    assert (t.num_layers, t.num_experts, t.top_k) == (2, 4, 2)
    assert t.position.tolist() == [0, 1, 0]
    assert t.request_names == ["request-0"]
    t = mp.Trace.from_arrays([[0, 1]], [[0.6, 0.4]], [0], [0], [0], [0], scores=[[0.6, 0.4, 0.0]], num_experts=3)
    assert t.has_scores and t.scores.shape == (1, 3)


def test_from_arrays_errors():
    with pytest.raises(ValueError, match=r"moepolicy::Trace.from_arrays: row 1: expert id 3 selected twice"):
        mp.Trace.from_arrays([[0, 1], [3, 3]], [[1, 1], [1, 1]], [0, 0], [0, 0], [0, 0], [0, 0])
    with pytest.raises(ValueError, match=r"experts must hold integers \(a float array is not truncated\)"):
        mp.Trace.from_arrays([[0.0, 1.5]], [[1, 1]], [0], [0], [0], [0])
    with pytest.raises(ValueError, match=r"phase \(0 prefill, 1 decode\) must be in \[0, 1\], element 0, got 2"):
        mp.Trace.from_arrays([[0, 1]], [[1, 1]], [0], [0], [0], [2])
    with pytest.raises(ValueError, match=r"layer must have one entry per row \(1\), got 2"):
        mp.Trace.from_arrays([[0, 1]], [[1, 1]], [0, 0], [0], [0], [0])
    with pytest.raises(ValueError, match=r"gate weight -1 of expert 1 is not a finite non-negative number"):
        mp.Trace.from_arrays([[0, 1]], [[1, -1]], [0], [0], [0], [0])
    with pytest.raises(ValueError, match=r"expert id 5 >= num_experts 4"):
        mp.Trace.from_arrays([[0, 5]], [[1, 1]], [0], [0], [0], [0], num_experts=4)


def test_parse_error_carries_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"token_idx": 0, "layer": 0}\nnot json\n')
    with pytest.raises(mp.ParseError) as e:
        mp.read_trace(bad)
    assert e.value.file == str(bad)
    assert isinstance(e.value.line, int) and e.value.line >= 1
    assert e.value.byte_offset is None
    assert str(e.value).startswith(f"{bad}:{e.value.line}: ")
    assert e.value.problem in str(e.value)
    assert isinstance(e.value, ValueError)


def test_parse_error_byte_offset_and_unknown_format(tmp_path, trace_path):
    cut = tmp_path / "cut.mtrace"
    cut.write_bytes(trace_path.read_bytes()[:100])
    with pytest.raises(mp.ParseError) as e:
        mp.read_trace(cut)
    assert e.value.line is None and isinstance(e.value.byte_offset, int)
    assert str(e.value).startswith(f"{cut}: byte ")
    other = tmp_path / "x.txt"
    other.write_text("hello")
    with pytest.raises(mp.ParseError, match=r"unknown trace format \(expected \.mtrace, \.jsonl, \.csv"):
        mp.read_trace(other)
    with pytest.raises(mp.ParseError, match="x.missing"):
        mp.read_trace(tmp_path / "x.missing.jsonl")


def test_write_error_is_os_error(trace, tmp_path):
    with pytest.raises(OSError, match="write_canonical"):
        trace.write_canonical(tmp_path / "no" / "such" / "dir" / "t.mtrace")


def test_every_importer(tmp_path):
    """read_trace picks the importer by content, as the C++ read_trace does (tests/data/io)."""
    from conftest import SOURCE_DIR

    data = SOURCE_DIR / "tests" / "data" / "io"
    a, b = data / "granite_a.jsonl", data / "granite_b.jsonl"
    one, two = mp.read_trace(a), mp.read_trace(b)
    both = mp.read_trace([a, b])  # several Granite files: one request per file
    assert both.num_rows == one.num_rows + two.num_rows and len(both.request_names) == 2
    assert "Granite" in mp.detect_trace_format(a)
    for name, fmt in (("vllm_decode_small.jsonl", "decode only"), ("vllm_raw_small.jsonl", "prefill + decode"),
                      ("flame_small", "FLAME-MoE")):
        t = mp.read_trace(data / name)
        assert t.num_rows > 0 and fmt in mp.detect_trace_format(data / name), name
    with pytest.raises(mp.ParseError, match="granite_truncated.jsonl:"):
        mp.read_trace(data / "granite_truncated.jsonl")


def test_batches_and_steps(trace):
    b, s = trace.batches(), trace.steps()
    assert len(b["first_row"]) == trace.num_batches and len(s["step"]) == trace.num_steps
    assert b["num_rows"].sum() == trace.num_rows
    assert (b["first_row"][1:] == b["first_row"][:-1] + b["num_rows"][:-1]).all()  # contiguous, in order
    rows = np.repeat(np.arange(trace.num_batches), b["num_rows"])
    assert (trace.layer == b["layer"][rows]).all() and (trace.step == b["step"][rows]).all()
    assert (trace.request == b["request"][rows]).all() and (trace.phase == b["phase"][rows]).all()
    assert s["num_batches"].sum() == trace.num_batches
    assert (b["step"][s["first_batch"]] == s["step"]).all()
