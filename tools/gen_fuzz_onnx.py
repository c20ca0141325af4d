#!/usr/bin/python3
"""Writes the seed inputs of the ONNX importer's fuzz target,
tests/fuzz/corpus/onnx/*.onnx: a few tiny graphs (under 1 KB each, made with
python3-onnx's helpers, weights from a fixed seed) that dlrun import maps
whole, between them most kinds of node, attribute and initializer encoding
the importer reads. Run from the top directory:
/usr/bin/python3 tools/gen_fuzz_onnx.py"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

C = 'tests/fuzz/corpus/onnx/'
rng = np.random.default_rng(11)


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def w(name, *shape):
    return numpy_helper.from_array(
        rng.standard_normal(shape).astype(np.float32).round(2), name)


def i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def save(name, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, producer_name='gen_fuzz_onnx',
                          opset_imports=[helper.make_operatorsetid('', opset)])
    m.ir_version = 8
    with open(C + name + '.onnx', 'wb') as f:
        f.write(m.SerializeToString())


N = helper.make_node

# Gemm (transB), Relu, Gemm, Softmax: torch's nn.Linear export
save('mlp', [
    N('Gemm', ['x', 'fc1.w', 'fc1.b'], ['h'], name='fc1', transB=1),
    N('Relu', ['h'], ['r'], name='relu'),
    N('Gemm', ['r', 'fc2.w', 'fc2.b'], ['z'], name='fc2', transB=1, alpha=1.0),
    N('Softmax', ['z'], ['y'], name='softmax', axis=-1)],
    [f32('x', ['N', 3])], [f32('y', ['N', 2])],
    [w('fc1.w', 4, 3), w('fc1.b', 4), w('fc2.w', 2, 4), w('fc2.b', 2)])

# Conv, MaxPool, Flatten, MatMul, Add, LogSoftmax
save('conv', [
    N('Conv', ['x', 'c.w', 'c.b'], ['c'], name='conv', kernel_shape=[3, 3],
      pads=[1, 1, 1, 1], strides=[1, 1]),
    N('MaxPool', ['c'], ['p'], name='pool', kernel_shape=[2, 2], strides=[2, 2]),
    N('Flatten', ['p'], ['f'], name='flatten', axis=1),
    N('MatMul', ['f', 'm.w'], ['m'], name='matmul'),
    N('Add', ['m', 'm.b'], ['a'], name='add'),
    N('LogSoftmax', ['a'], ['y'], name='lsm', axis=1)],
    [f32('x', ['N', 1, 4, 4])], [f32('y', ['N', 3])],
    [w('c.w', 2, 1, 3, 3), w('c.b', 2), w('m.w', 8, 3), w('m.b', 3)])

# Shape arithmetic the exporter writes for x.view(x.size(0), -1), a
# Transpose and a Constant
save('shape', [
    N('Shape', ['x'], ['s'], name='shape'),
    N('Gather', ['s', 'zero'], ['n'], name='gather', axis=0),
    N('Unsqueeze', ['n', 'axes0'], ['nu'], name='unsqueeze'),
    N('Constant', [], ['minus1'], name='const',
      value=numpy_helper.from_array(np.array([-1], np.int64))),
    N('Concat', ['nu', 'minus1'], ['shp'], name='concat', axis=0),
    N('Transpose', ['x'], ['t'], name='transpose', perm=[0, 2, 1]),
    N('Reshape', ['t', 'shp'], ['r'], name='reshape'),
    N('Tanh', ['r'], ['y'], name='tanh')],
    [f32('x', ['N', 2, 3])], [f32('y', ['N', 6])],
    [numpy_helper.from_array(np.array(0, np.int64), 'zero'), i64('axes0', [0])],
    opset=13)

# LayerNormalization, Gelu written out with Erf, Mul, Div, Sub, Sigmoid
save('norm', [
    N('LayerNormalization', ['x', 'ln.w', 'ln.b'], ['l'], name='ln', axis=-1,
      epsilon=1e-5),
    N('Div', ['l', 'sqrt2'], ['d'], name='div'),
    N('Erf', ['d'], ['e'], name='erf'),
    N('Add', ['e', 'one'], ['e1'], name='add1'),
    N('Mul', ['l', 'e1'], ['g'], name='mul'),
    N('Mul', ['g', 'half'], ['gh'], name='mulh'),
    N('Sigmoid', ['gh'], ['s'], name='sigmoid'),
    N('Sub', ['gh', 's'], ['y'], name='sub')],
    [f32('x', ['N', 4])], [f32('y', ['N', 4])],
    [w('ln.w', 4), w('ln.b', 4),
     numpy_helper.from_array(np.array(1.4142135, np.float32), 'sqrt2'),
     numpy_helper.from_array(np.array(1.0, np.float32), 'one'),
     numpy_helper.from_array(np.array(0.5, np.float32), 'half')])

# A GRU over a sequence (weights as float_data, not raw_data), Squeeze
gw = helper.make_tensor('gru.w', TensorProto.FLOAT, [1, 6, 3],
                        rng.standard_normal(18).round(2).tolist())
gr = helper.make_tensor('gru.r', TensorProto.FLOAT, [1, 6, 2],
                        rng.standard_normal(12).round(2).tolist())
save('gru', [
    N('Transpose', ['x'], ['xt'], name='tin', perm=[1, 0, 2]),
    N('GRU', ['xt', 'gru.w', 'gru.r'], ['ys', 'h'], name='gru', hidden_size=2,
      linear_before_reset=1),
    N('Squeeze', ['ys', 'axis1'], ['sq'], name='squeeze'),
    N('Transpose', ['sq'], ['y'], name='tout', perm=[1, 0, 2])],
    [f32('x', ['N', 3, 3])], [f32('y', ['N', 3, 2])],
    [gw, gr, i64('axis1', [1])], opset=14)

# Slice, Pad, Split into two outputs, LeakyRelu, Concat
save('slice', [
    N('Slice', ['x', 'st', 'en', 'ax'], ['s'], name='slice'),
    N('Pad', ['s', 'pads'], ['p'], name='pad', mode='constant'),
    N('Split', ['p', 'sp'], ['a', 'b'], name='split', axis=1),
    N('LeakyRelu', ['a'], ['la'], name='lrelu', alpha=0.2),
    N('Concat', ['la', 'b'], ['y'], name='cat', axis=1)],
    [f32('x', ['N', 6])], [f32('y', ['N', 6])],
    [i64('st', [1]), i64('en', [5]), i64('ax', [1]), i64('pads', [0, 1, 0, 1]),
     i64('sp', [3, 3])], opset=13)
