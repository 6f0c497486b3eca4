"""The BERT encoder of a sentence-transformers folder as an ONNX graph, written without torch.

The bundled all-MiniLM-L6-v2 ships its weights as ``model.safetensors`` and its shape in
``config.json``. A safetensors file is an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the raw little-endian tensors, so
numpy reads it directly. :func:`build_model` turns those weights into the graph the Hugging
Face ``BertModel`` computes (embeddings, then per layer: self-attention, add & norm, GELU
feed-forward, add & norm) with ``onnx.helper``; pooling and normalisation stay in numpy
(``onnx_embedder.OnnxMiniLM``). Installing torch (about 700 MB) only to trace this once was
the largest part of the ``embed`` extra and ~15 s of a user's first process.

Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, batch x sequence);
output ``last_hidden_state`` (float32, batch x sequence x hidden). Opset 17 (it has
LayerNormalization); ONNX Runtime fuses attention, GELU and layer norm when it optimises.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

OPSET = 17
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
# A safetensors header larger than this is not a model this module was written for.
_MAX_HEADER_BYTES = 100 << 20
_EXTERNAL_MIN_BYTES = 1024


class ModelFormatError(ValueError):
    """The folder's weights or config are not the BERT layout this module writes."""


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file, by name (copies, little-endian, native dtype)."""
    data = path.read_bytes()
    if len(data) < 8:
        raise ModelFormatError(f"{path} is too short to be a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(_MAX_HEADER_BYTES, len(data) - 8):
        raise ModelFormatError(f"{path} has a header length {header_len} past the file")
    header = json.loads(data[8 : 8 + header_len])
    body = memoryview(data)[8 + header_len :]
    tensors: dict[str, np.ndarray] = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(spec.get("dtype"))
        if dtype is None:
            raise ModelFormatError(f"{path}: tensor {name} has unsupported dtype {spec!r}")
        start, end = (int(x) for x in spec["data_offsets"])
        shape = tuple(int(x) for x in spec["shape"])
        array = np.frombuffer(body[start:end], dtype=np.dtype(dtype).newbyteorder("<"))
        if array.size != math.prod(shape):
            raise ModelFormatError(f"{path}: tensor {name} holds {array.size} values, not {shape}")
        tensors[name] = array.reshape(shape).astype(dtype)
    return tensors


def build_model(model_dir: Path, weights_path: Path) -> Any:
    """The ONNX ``ModelProto`` of the BERT encoder in ``model_dir`` (config + safetensors).

    Every weight of 1 KB or more is written to ``weights_path`` and referenced from the
    graph as external data, so save the graph in the same folder as ``weights_path``.
    """
    with open(weights_path, "wb") as weights_file:
        return _build(model_dir, weights_path, weights_file)


def _build(model_dir: Path, weights_path: Path, weights_file: Any) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    config = json.loads((model_dir / "config.json").read_text("utf-8"))
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
        raise ModelFormatError(f"{model_dir} is not a BERT model with exact GELU: {config!r}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelFormatError(f"{model_dir}: only absolute position embeddings are written")
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config["layer_norm_eps"])
    head_dim = hidden // heads
    # Half-precision weights (elastimem's packaged copy) are computed in float32, as the
    # original's are: float16 storage halves the download, not the arithmetic.
    weights = {
        name: array.astype(np.float32) if array.dtype == np.float16 else array
        for name, array in read_safetensors(model_dir / "model.safetensors").items()
    }
    # Some exports prefix every name with the model's class ("bert.").
    if "embeddings.word_embeddings.weight" not in weights:
        weights = {k.removeprefix("bert."): v for k, v in weights.items()}

    nodes: list[Any] = []
    inits: list[Any] = []

    def init(name: str, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        if array.nbytes < _EXTERNAL_MIN_BYTES:
            inits.append(numpy_helper.from_array(array, name))
            return name
        # Written straight to the weights file: 90 MB copied through protobuf messages
        # (make_graph, make_model, serialise) cost ~1 s of a user's first start.
        offset = weights_file.tell()
        weights_file.write(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
        proto = TensorProto()
        proto.name = name
        proto.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        proto.dims.extend(array.shape)
        proto.data_location = TensorProto.EXTERNAL
        for key, value in (
            ("location", weights_path.name),
            ("offset", str(offset)),
            ("length", str(array.nbytes)),
        ):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
        inits.append(proto)
        return name

    def weight(name: str) -> str:
        try:
            array = weights[name]
        except KeyError:
            raise ModelFormatError(f"{model_dir}: the weights have no {name}") from None
        return init(name, array.astype(np.float32))

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def dense(x: str, prefix: str, out: str) -> str:
        # torch's Linear stores (out, in); MatMul wants (in, out).
        w_t = init(f"{prefix}.weight_t", weights[f"{prefix}.weight"].astype(np.float32).T)
        return node("Add", [node("MatMul", [x, w_t], f"{out}_mm"), weight(f"{prefix}.bias")], out)

    def layer_norm(x: str, prefix: str, out: str) -> str:
        scale, bias = weight(f"{prefix}.weight"), weight(f"{prefix}.bias")
        return node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=eps)

    # Embeddings: word + absolute position (0..sequence-1) + token type, then layer norm.
    # Positions as a cumulative count of ones along the sequence, not Range: ONNX Runtime
    # 1.32 rewrites Gather(table, Range(scalars)) into a Slice that then fails to run.
    one = init("c_one", np.array(1, np.int64))
    ones = node(
        "ConstantOfShape",
        [node("Shape", ["input_ids"], "ids_shape")],
        "ids_ones",
        value=numpy_helper.from_array(np.array([1], np.int64)),
    )
    counted = node("CumSum", [ones, init("c_axis1", np.array(1, np.int64))], "ids_count")
    positions = node("Sub", [counted, one], "positions")
    word = node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"], "we")
    position = node("Gather", [weight("embeddings.position_embeddings.weight"), positions], "pe")
    kind = node(
        "Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"], "te"
    )
    summed = node("Add", [node("Add", [word, position], "we_pe"), kind], "emb_sum")
    x = layer_norm(summed, "embeddings.LayerNorm", "emb")

    # The additive attention mask, as Hugging Face builds it: 0 where attended, the float32
    # minimum where padded, shaped (batch, 1, 1, sequence) to broadcast over heads and rows.
    mask_f = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    mask_4d = node("Unsqueeze", [mask_f, init("c_axes_12", np.array([1, 2], np.int64))], "mask4")
    inverted = node("Sub", [init("c_onef", np.array(1.0, np.float32)), mask_4d], "mask_inv")
    floor = init("c_min", np.array(np.finfo(np.float32).min, np.float32))
    mask_bias = node("Mul", [inverted, floor], "mask_bias")

    split_shape = init("c_split", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = init("c_merge", np.array([0, 0, hidden], np.int64))
    scale = init("c_scale", np.array(1.0 / math.sqrt(head_dim), np.float32))
    sqrt2 = init("c_sqrt2", np.array(math.sqrt(2.0), np.float32))
    half = init("c_half", np.array(0.5, np.float32))
    onef = "c_onef"

    def heads_of(x: str, name: str, out: str, perm: list[int]) -> str:
        projected = dense(x, name, f"{out}_proj")
        return node(
            "Transpose", [node("Reshape", [projected, split_shape], f"{out}_r")], out, perm=perm
        )

    for i in range(layers):
        p, t = f"encoder.layer.{i}", f"l{i}"
        q = heads_of(x, f"{p}.attention.self.query", f"{t}_q", [0, 2, 1, 3])
        k = heads_of(x, f"{p}.attention.self.key", f"{t}_k", [0, 2, 3, 1])  # transposed
        v = heads_of(x, f"{p}.attention.self.value", f"{t}_v", [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"{t}_qk"), scale], f"{t}_scaled")
        masked = node("Add", [scores, mask_bias], f"{t}_masked")
        probs = node("Softmax", [masked], f"{t}_p", axis=-1)
        context = node("MatMul", [probs, v], f"{t}_ctx")
        context = node("Transpose", [context], f"{t}_ctxt", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge_shape], f"{t}_ctxm")
        attended = dense(context, f"{p}.attention.output.dense", f"{t}_ao")
        residual = node("Add", [attended, x], f"{t}_res1")
        x = layer_norm(residual, f"{p}.attention.output.LayerNorm", f"{t}_ln1")
        # Exact GELU, as BERT's "gelu": 0.5 * h * (1 + erf(h / sqrt(2))).
        h = dense(x, f"{p}.intermediate.dense", f"{t}_h")
        erf = node("Erf", [node("Div", [h, sqrt2], f"{t}_hs")], f"{t}_erf")
        halved = node("Mul", [h, half], f"{t}_hh")
        gelu = node("Mul", [halved, node("Add", [erf, onef], f"{t}_e1")], f"{t}_gelu")
        out = dense(gelu, f"{p}.output.dense", f"{t}_o")
        residual = node("Add", [out, x], f"{t}_res2")
        x = layer_norm(residual, f"{p}.output.LayerNorm", f"{t}_ln2")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))

    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, dims)
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*dims, hidden])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="elastimem",
    )
    model.ir_version = 8  # readable by every onnxruntime >= 1.17 (the extra's floor)
    return model
