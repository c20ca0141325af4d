#!/bin/sh
# The ONNX node tests of Debian's libonnx-testdata for the op types dlrun
# import maps, printing TAP. Every test under $ONNX_NODE_DIR (default
# /usr/share/libonnx-testdata/data/node) whose nodes all have op types of
# the importer's table (src/import/onnx.c, `static const struct onnx_op
# ops[]`) is
# - imported, run by `dlrun infer` on test_data_set_0's input_N.pb and
#   compared with its output_N.pb within 1e-4 relative (tests/npycmp), or
# - listed below (`unrepresentable`) with the reason dlrun cannot run it:
#   `refuse` ones must make `dlrun import` exit 2 with one line and write
#   nothing; `skip` ones are reported as skipped.
# The TensorProto files become .npy through tests/onnx2npy (built from
# the same generated protobuf-c code as dlrun import), so no Python is
# needed. The whole script is skipped when the directory is absent or
# dlrun was built without ONNX import. Under valgrind (DLRUN_VALGRIND=yes)
# one node test in 8 runs under it and the others run plainly (over 300
# runs of dlrun under valgrind would take CI a quarter of an hour; the
# sanitizer build runs them all).
#
# Environment: see tests/lib.sh; ONNX_NODE_DIR, ONNX2NPY (tests/onnx2npy).

. "${srcdir:-$(dirname "$0")/..}/tests/lib.sh"

: "${ONNX_NODE_DIR:=/usr/share/libonnx-testdata/data/node}"
if [ -z "${ONNX2NPY:-}" ]; then
	ONNX2NPY=./tests/onnx2npy
	[ -x "$ONNX2NPY" ] || ONNX2NPY=$(dirname "$DLRUN")/../tests/onnx2npy
fi
case $ONNX2NPY in /*) ;; *) ONNX2NPY=$(pwd)/$ONNX2NPY ;; esac

if [ ! -d "$ONNX_NODE_DIR" ]; then
	echo "1..0 # SKIP no ONNX node tests in $ONNX_NODE_DIR (Debian: libonnx-testdata)"
	exit 0
fi
if ! "$DLRUN" --version 2>/dev/null | grep -F 'onnx import: yes' >/dev/null ||
	[ ! -x "$ONNX2NPY" ]; then
	echo "1..0 # SKIP dlrun was built without ONNX import"
	exit 0
fi
if [ -z "$NPYCMP" ] || [ ! -x "$NPYCMP" ]; then
	echo "Bail out! tests/npycmp is needed (NPYCMP)"
	exit 1
fi

# the op types dlrun import maps, from its table
mapped=" $(sed -n 's/^	{"\([A-Za-z]*\)", "[a-z_ ]*", m_[a-z_]*},$/\1/p' \
	"$srcdir/src/import/onnx.c" | tr '\n' ' ')"
[ "$(echo $mapped | wc -w)" -gt 40 ] || {
	echo "Bail out! the op table of src/import/onnx.c was not found"
	exit 1
}

# The node tests dlrun cannot represent: NAME, refuse|skip, the reason.
unrepresentable() {
	cat <<'LIST'
test_add_bcast                                   refuse broadcasting between operands of different rank
test_add_uint8                                   refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_and2d                                       refuse bool inputs; dlrun inputs are float or integer
test_and3d                                       refuse bool inputs; dlrun inputs are float or integer
test_and4d                                       refuse bool inputs; dlrun inputs are float or integer
test_and_bcast3v1d                               refuse bool inputs; dlrun inputs are float or integer
test_and_bcast3v2d                               refuse bool inputs; dlrun inputs are float or integer
test_and_bcast4v2d                               refuse bool inputs; dlrun inputs are float or integer
test_and_bcast4v3d                               refuse bool inputs; dlrun inputs are float or integer
test_and_bcast4v4d                               refuse bool inputs; dlrun inputs are float or integer
test_argmax_default_axis_example                 refuse works along axis 0, the batch dimension
test_argmax_default_axis_example_select_last_index refuse works along axis 0, the batch dimension
test_argmax_default_axis_random                  refuse works along axis 0, the batch dimension
test_argmax_default_axis_random_select_last_index refuse works along axis 0, the batch dimension
test_argmax_keepdims_example_select_last_index   refuse select_last_index (dlrun's argmax gives the first of ties)
test_argmax_keepdims_random_select_last_index    refuse select_last_index (dlrun's argmax gives the first of ties)
test_argmax_negative_axis_keepdims_example_select_last_index refuse select_last_index (dlrun's argmax gives the first of ties)
test_argmax_negative_axis_keepdims_random_select_last_index refuse select_last_index (dlrun's argmax gives the first of ties)
test_argmax_no_keepdims_example_select_last_index refuse select_last_index (dlrun's argmax gives the first of ties)
test_argmax_no_keepdims_random_select_last_index refuse select_last_index (dlrun's argmax gives the first of ties)
test_basic_conv_with_padding                     refuse the weight is a graph input, not a constant
test_basic_conv_without_padding                  refuse the weight is a graph input, not a constant
test_batchnorm_epsilon                           refuse the statistics are graph inputs, not constants
test_batchnorm_epsilon_training_mode             refuse training mode (batch statistics)
test_batchnorm_example                           refuse the statistics are graph inputs, not constants
test_batchnorm_example_training_mode             refuse training mode (batch statistics)
test_cast_BFLOAT16_to_FLOAT                      refuse float16/bfloat16 data; dlrun computes in float32
test_cast_DOUBLE_to_FLOAT16                      skip   float16/bfloat16 data; dlrun computes in float32
test_cast_FLOAT16_to_DOUBLE                      refuse float16/bfloat16 data; dlrun computes in float32
test_cast_FLOAT16_to_FLOAT                       refuse float16/bfloat16 data; dlrun computes in float32
test_cast_FLOAT_to_BFLOAT16                      refuse casts data between integers and floats
test_cast_FLOAT_to_FLOAT16                       skip   float16/bfloat16 data; dlrun computes in float32
test_cast_FLOAT_to_STRING                        refuse casts data between integers and floats
test_cast_STRING_to_FLOAT                        refuse string data
test_castlike_BFLOAT16_to_FLOAT_expanded         refuse float16/bfloat16 data; dlrun computes in float32
test_castlike_DOUBLE_to_FLOAT16_expanded         refuse float16/bfloat16 data; dlrun computes in float32
test_castlike_FLOAT16_to_DOUBLE_expanded         refuse float16/bfloat16 data; dlrun computes in float32
test_castlike_FLOAT16_to_FLOAT_expanded          refuse float16/bfloat16 data; dlrun computes in float32
test_castlike_FLOAT_to_BFLOAT16_expanded         refuse float16/bfloat16 data; dlrun computes in float32
test_castlike_FLOAT_to_FLOAT16_expanded          refuse float16/bfloat16 data; dlrun computes in float32
test_castlike_FLOAT_to_STRING_expanded           refuse string data
test_castlike_STRING_to_FLOAT_expanded           refuse string data
test_clip                                        refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_clip_default_int8_inbounds                  refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_clip_default_int8_max                       refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_clip_default_int8_min                       refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_clip_default_max                            refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_clip_default_min                            refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_clip_example                                refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_clip_inbounds                               refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_clip_outbounds                              refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_clip_splitbounds                            refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_concat_1d_axis_0                            refuse works along axis 0, the batch dimension
test_concat_1d_axis_negative_1                   refuse works along axis 0, the batch dimension
test_concat_2d_axis_0                            refuse works along axis 0, the batch dimension
test_concat_2d_axis_negative_2                   refuse works along axis 0, the batch dimension
test_concat_3d_axis_0                            refuse works along axis 0, the batch dimension
test_concat_3d_axis_negative_3                   refuse works along axis 0, the batch dimension
test_constant                                    refuse no graph inputs
test_constant_pad                                refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_constantofshape_float_ones                  refuse the shape is a graph input
test_constantofshape_int_shape_zero              refuse the shape is a graph input
test_constantofshape_int_zeros                   refuse the shape is a graph input
test_conv_with_autopad_same                      refuse the weight is a graph input, not a constant
test_conv_with_strides_and_asymmetric_padding    refuse the weight is a graph input, not a constant
test_conv_with_strides_no_padding                refuse the weight is a graph input, not a constant
test_conv_with_strides_padding                   refuse the weight is a graph input, not a constant
test_convtranspose                               refuse the weight is a graph input, not a constant
test_convtranspose_1d                            refuse the weight is a graph input, not a constant
test_convtranspose_3d                            refuse the weight is a graph input, not a constant
test_convtranspose_autopad_same                  refuse the weight is a graph input, not a constant
test_convtranspose_dilations                     refuse the weight is a graph input, not a constant
test_convtranspose_kernel_shape                  refuse the weight is a graph input, not a constant
test_convtranspose_output_shape                  refuse the weight is a graph input, not a constant
test_convtranspose_pad                           refuse the weight is a graph input, not a constant
test_convtranspose_pads                          refuse the weight is a graph input, not a constant
test_convtranspose_with_kernel                   refuse the weight is a graph input, not a constant
test_div_bcast                                   refuse broadcasting between operands of different rank
test_div_uint8                                   refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_dropout_default_mask                        refuse an optional output left empty
test_dropout_default_mask_ratio                  refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_dropout_default_ratio                       refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_edge_pad                                    refuse a padding mode other than constant
test_einsum_batch_diagonal                       refuse an Einsum other than a batched matrix product
test_einsum_inner_prod                           refuse an Einsum other than a batched matrix product
test_einsum_sum                                  refuse an Einsum other than a batched matrix product
test_einsum_transpose                            refuse an Einsum other than a batched matrix product
test_elu                                         refuse opset 6 (dlrun import reads 7 and later)
test_elu_default                                 refuse opset 6 (dlrun import reads 7 and later)
test_elu_example                                 refuse opset 6 (dlrun import reads 7 and later)
test_equal_bcast                                 refuse broadcasting between operands of different rank
test_erf                                         refuse Erf outside GELU
test_expand_dim_changed                          refuse the target shape is a graph input
test_expand_dim_unchanged                        refuse the target shape is a graph input
test_flatten_axis0                               refuse flatten across the batch dimension
test_flatten_axis2                               refuse flatten across the batch dimension
test_flatten_axis3                               refuse flatten across the batch dimension
test_flatten_negative_axis1                      refuse flatten across the batch dimension
test_flatten_negative_axis2                      refuse flatten across the batch dimension
test_flatten_negative_axis4                      refuse flatten across the batch dimension
test_gather_0                                    refuse indices are a graph input (no data-dependent gather)
test_gather_1                                    refuse indices are a graph input (no data-dependent gather)
test_gather_2d_indices                           refuse indices are a graph input (no data-dependent gather)
test_gather_negative_indices                     refuse indices are a graph input (no data-dependent gather)
test_gemm_all_attributes                         refuse transA moves the batch dimension
test_gemm_alpha                                  refuse the weight is a graph input, not a constant
test_gemm_beta                                   refuse the weight is a graph input, not a constant
test_gemm_default_matrix_bias                    refuse the weight is a graph input, not a constant
test_gemm_default_no_bias                        refuse the weight is a graph input, not a constant
test_gemm_default_scalar_bias                    refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_gemm_default_single_elem_vector_bias        refuse the weight is a graph input, not a constant
test_gemm_default_vector_bias                    refuse the weight is a graph input, not a constant
test_gemm_default_zero_bias                      refuse the weight is a graph input, not a constant
test_gemm_transposeA                             refuse transA moves the batch dimension
test_gemm_transposeB                             refuse the weight is a graph input, not a constant
test_globalaveragepool                           refuse opset 6 (dlrun import reads 7 and later)
test_globalaveragepool_precomputed               refuse opset 6 (dlrun import reads 7 and later)
test_globalmaxpool                               refuse opset 6 (dlrun import reads 7 and later)
test_globalmaxpool_precomputed                   refuse opset 6 (dlrun import reads 7 and later)
test_greater_bcast                               refuse broadcasting between operands of different rank
test_greater_equal_bcast                         refuse broadcasting between operands of different rank
test_greater_equal_bcast_expanded                refuse broadcasting between operands of different rank
test_gru_batchwise                               refuse a recurrent input that is not the exporters' transpose of batch-first data
test_gru_defaults                                refuse a recurrent input that is not the exporters' transpose of batch-first data
test_gru_seq_length                              refuse a recurrent input that is not the exporters' transpose of batch-first data
test_gru_with_initial_bias                       refuse a recurrent input that is not the exporters' transpose of batch-first data
test_hardsigmoid                                 refuse opset 6 (dlrun import reads 7 and later)
test_hardsigmoid_default                         refuse opset 6 (dlrun import reads 7 and later)
test_hardsigmoid_example                         refuse opset 6 (dlrun import reads 7 and later)
test_identity_opt                                refuse an optional or sequence input
test_identity_sequence                           refuse an optional or sequence input
test_instancenorm_epsilon                        refuse opset 6 (dlrun import reads 7 and later)
test_instancenorm_example                        refuse opset 6 (dlrun import reads 7 and later)
test_layer_normalization_2d_axis0                refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_2d_axis1                refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_2d_axis_negative_1      refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_2d_axis_negative_2      refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_3d_axis0_epsilon        refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_3d_axis1_epsilon        refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_3d_axis2_epsilon        refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_3d_axis_negative_1_epsilon refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_3d_axis_negative_2_epsilon refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_3d_axis_negative_3_epsilon refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis0                refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis1                refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis2                refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis3                refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis_negative_1      refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis_negative_2      refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis_negative_3      refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_4d_axis_negative_4      refuse the extra Mean/InvStdDev outputs (training statistics)
test_layer_normalization_default_axis            refuse the extra Mean/InvStdDev outputs (training statistics)
test_less_bcast                                  refuse broadcasting between operands of different rank
test_less_equal_bcast                            refuse broadcasting between operands of different rank
test_less_equal_bcast_expanded                   refuse broadcasting between operands of different rank
test_logsoftmax_axis_0                           refuse works along axis 0, the batch dimension
test_logsoftmax_axis_0_expanded                  refuse works along axis 0, the batch dimension
test_lstm_batchwise                              refuse a recurrent input that is not the exporters' transpose of batch-first data
test_lstm_defaults                               refuse a recurrent input that is not the exporters' transpose of batch-first data
test_lstm_with_initial_bias                      refuse a recurrent input that is not the exporters' transpose of batch-first data
test_lstm_with_peepholes                         refuse a recurrent input that is not the exporters' transpose of batch-first data
test_matmul_2d                                   refuse matmul of operands of different rank
test_maxpool_2d_uint8                            refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_maxpool_with_argmax_2d_precomputed_pads     refuse MaxPool's indices output
test_maxpool_with_argmax_2d_precomputed_strides  refuse MaxPool's indices output
test_mod_broadcast                               refuse a modulo of data (Mod is folded on constants only)
test_mod_int64_fmod                              refuse a modulo of data (Mod is folded on constants only)
test_mod_mixed_sign_float16                      refuse a modulo of data (Mod is folded on constants only)
test_mod_mixed_sign_float32                      refuse a modulo of data (Mod is folded on constants only)
test_mod_mixed_sign_float64                      refuse a modulo of data (Mod is folded on constants only)
test_mod_mixed_sign_int16                        refuse a modulo of data (Mod is folded on constants only)
test_mod_mixed_sign_int32                        refuse a modulo of data (Mod is folded on constants only)
test_mod_mixed_sign_int64                        refuse a modulo of data (Mod is folded on constants only)
test_mod_mixed_sign_int8                         refuse a modulo of data (Mod is folded on constants only)
test_mod_uint16                                  refuse a modulo of data (Mod is folded on constants only)
test_mod_uint32                                  refuse a modulo of data (Mod is folded on constants only)
test_mod_uint64                                  refuse a modulo of data (Mod is folded on constants only)
test_mod_uint8                                   refuse a modulo of data (Mod is folded on constants only)
test_mul_bcast                                   refuse broadcasting between operands of different rank
test_mul_uint8                                   refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_mvn_expanded                                refuse works along axis 0, the batch dimension
test_not_2d                                      refuse opset 6 (dlrun import reads 7 and later)
test_not_3d                                      refuse opset 6 (dlrun import reads 7 and later)
test_not_4d                                      refuse opset 6 (dlrun import reads 7 and later)
test_or2d                                        refuse bool inputs; dlrun inputs are float or integer
test_or3d                                        refuse bool inputs; dlrun inputs are float or integer
test_or4d                                        refuse bool inputs; dlrun inputs are float or integer
test_or_bcast3v1d                                refuse bool inputs; dlrun inputs are float or integer
test_or_bcast3v2d                                refuse bool inputs; dlrun inputs are float or integer
test_or_bcast4v2d                                refuse bool inputs; dlrun inputs are float or integer
test_or_bcast4v3d                                refuse bool inputs; dlrun inputs are float or integer
test_or_bcast4v4d                                refuse bool inputs; dlrun inputs are float or integer
test_pow                                         refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_bcast_array                             refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_bcast_scalar                            refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_pow_example                                 refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_float                             refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_float32_int32                     refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_float32_int64                     refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_float32_uint32                    refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_pow_types_float32_uint64                    refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_pow_types_int                               refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_int32_float32                     refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_int32_int32                       refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_int64_float32                     refuse Pow with an exponent other than 2 or 0.5, or of data
test_pow_types_int64_int64                       refuse Pow with an exponent other than 2 or 0.5, or of data
test_range_float_type_positive_delta             refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_range_int32_type_negative_delta             refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_reduce_max_default_axes_keepdim_example     refuse works along axis 0, the batch dimension
test_reduce_max_default_axes_keepdims_random     refuse works along axis 0, the batch dimension
test_reduce_mean_default_axes_keepdims_example   refuse works along axis 0, the batch dimension
test_reduce_mean_default_axes_keepdims_random    refuse works along axis 0, the batch dimension
test_reduce_min_default_axes_keepdims_example    refuse works along axis 0, the batch dimension
test_reduce_min_default_axes_keepdims_random     refuse works along axis 0, the batch dimension
test_reduce_prod_default_axes_keepdims_example   refuse a product over data (ReduceProd is folded on constants only)
test_reduce_prod_default_axes_keepdims_random    refuse a product over data (ReduceProd is folded on constants only)
test_reduce_prod_do_not_keepdims_example         refuse a product over data (ReduceProd is folded on constants only)
test_reduce_prod_do_not_keepdims_random          refuse a product over data (ReduceProd is folded on constants only)
test_reduce_prod_keepdims_example                refuse a product over data (ReduceProd is folded on constants only)
test_reduce_prod_keepdims_random                 refuse a product over data (ReduceProd is folded on constants only)
test_reduce_prod_negative_axes_keepdims_example  refuse a product over data (ReduceProd is folded on constants only)
test_reduce_prod_negative_axes_keepdims_random   refuse a product over data (ReduceProd is folded on constants only)
test_reduce_sum_default_axes_keepdims_example    refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_default_axes_keepdims_random     refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_do_not_keepdims_example          refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_do_not_keepdims_random           refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_empty_axes_input_noop_example    refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_empty_axes_input_noop_random     refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_keepdims_example                 refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_keepdims_random                  refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_negative_axes_keepdims_example   refuse starts/axes/split are graph inputs, not constants
test_reduce_sum_negative_axes_keepdims_random    refuse starts/axes/split are graph inputs, not constants
test_reflect_pad                                 refuse a padding mode other than constant
test_reshape_allowzero_reordered                 refuse the shape is a graph input, not a constant
test_reshape_extended_dims                       refuse the shape is a graph input, not a constant
test_reshape_negative_dim                        refuse the shape is a graph input, not a constant
test_reshape_negative_extended_dims              refuse the shape is a graph input, not a constant
test_reshape_one_dim                             refuse the shape is a graph input, not a constant
test_reshape_reduced_dims                        refuse the shape is a graph input, not a constant
test_reshape_reordered_all_dims                  refuse the shape is a graph input, not a constant
test_reshape_reordered_last_dims                 refuse the shape is a graph input, not a constant
test_reshape_zero_and_negative_dim               refuse the shape is a graph input, not a constant
test_reshape_zero_dim                            refuse the shape is a graph input, not a constant
test_rnn_seq_length                              refuse a recurrent input that is not the exporters' transpose of batch-first data
test_scatternd                                   refuse a scatter into data (ScatterND is folded on constants only)
test_scatternd_add                               refuse a scatter into data (ScatterND is folded on constants only)
test_scatternd_multiply                          refuse a scatter into data (ScatterND is folded on constants only)
test_selu                                        refuse opset 6 (dlrun import reads 7 and later)
test_selu_default                                refuse opset 6 (dlrun import reads 7 and later)
test_selu_example                                refuse opset 6 (dlrun import reads 7 and later)
test_shape                                       refuse the output does not depend on any input (all folded)
test_shape_clip_end                              refuse the output does not depend on any input (all folded)
test_shape_clip_start                            refuse the output does not depend on any input (all folded)
test_shape_end_1                                 refuse the output does not depend on any input (all folded)
test_shape_end_negative_1                        refuse the output does not depend on any input (all folded)
test_shape_example                               refuse the output does not depend on any input (all folded)
test_shape_start_1                               refuse the output does not depend on any input (all folded)
test_shape_start_1_end_2                         refuse the output does not depend on any input (all folded)
test_shape_start_1_end_negative_1                refuse the output does not depend on any input (all folded)
test_shape_start_negative_1                      refuse the output does not depend on any input (all folded)
test_simple_rnn_batchwise                        refuse a recurrent input that is not the exporters' transpose of batch-first data
test_simple_rnn_defaults                         refuse a recurrent input that is not the exporters' transpose of batch-first data
test_simple_rnn_with_initial_bias                refuse a recurrent input that is not the exporters' transpose of batch-first data
test_slice                                       refuse starts/axes/split are graph inputs, not constants
test_slice_default_axes                          refuse starts/axes/split are graph inputs, not constants
test_slice_default_steps                         refuse starts/axes/split are graph inputs, not constants
test_slice_end_out_of_bounds                     refuse starts/axes/split are graph inputs, not constants
test_slice_neg                                   refuse starts/axes/split are graph inputs, not constants
test_slice_neg_steps                             refuse starts/axes/split are graph inputs, not constants
test_slice_negative_axes                         refuse starts/axes/split are graph inputs, not constants
test_slice_start_out_of_bounds                   refuse starts/axes/split are graph inputs, not constants
test_softmax_axis_0                              refuse works along axis 0, the batch dimension
test_softmax_axis_0_expanded                     refuse works along axis 0, the batch dimension
test_softplus                                    refuse opset 6 (dlrun import reads 7 and later)
test_softplus_example                            refuse opset 6 (dlrun import reads 7 and later)
test_split_equal_parts_1d                        refuse works along axis 0, the batch dimension
test_split_equal_parts_default_axis              refuse works along axis 0, the batch dimension
test_split_variable_parts_1d                     refuse works along axis 0, the batch dimension
test_split_variable_parts_2d                     refuse starts/axes/split are graph inputs, not constants
test_split_variable_parts_default_axis           refuse works along axis 0, the batch dimension
test_split_zero_size_splits                      refuse works along axis 0, the batch dimension
test_squeeze                                     refuse starts/axes/split are graph inputs, not constants
test_squeeze_negative_axes                       refuse starts/axes/split are graph inputs, not constants
test_sub_bcast                                   refuse broadcasting between operands of different rank
test_sub_uint8                                   refuse unsigned/8-bit integer data, which dlrun's float ops do not take
test_tile                                        refuse the repeats are a graph input, not a constant
test_tile_precomputed                            refuse the repeats are a graph input, not a constant
test_top_k                                       refuse k is a graph input, not a constant
test_top_k_negative_axis                         refuse k is a graph input, not a constant
test_top_k_smallest                              refuse k is a graph input, not a constant
test_training_dropout                            refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_training_dropout_default                    refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_training_dropout_default_mask               refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_training_dropout_mask                       refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_training_dropout_zero_ratio                 refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_training_dropout_zero_ratio_mask            refuse a scalar (rank-0) graph input: dlrun inputs have a batch dimension
test_transpose_all_permutations_2                refuse a transpose that moves the batch dimension
test_transpose_all_permutations_3                refuse the permutation moves the batch dimension
test_transpose_all_permutations_4                refuse the permutation moves the batch dimension
test_transpose_all_permutations_5                refuse the permutation moves the batch dimension
test_transpose_default                           refuse the permutation moves the batch dimension
test_tril                                        refuse a matrix of rank 2 mixes the batch with the rows
test_tril_neg                                    refuse k is a graph input of rank 0, not a constant
test_tril_out_neg                                refuse k is a graph input of rank 0, not a constant
test_tril_out_pos                                refuse k is a graph input of rank 0, not a constant
test_tril_pos                                    refuse k is a graph input of rank 0, not a constant
test_tril_square_neg                             refuse k is a graph input of rank 0, not a constant
test_tril_zero                                   refuse a size other than the batch is dynamic
test_triu                                        refuse a matrix of rank 2 mixes the batch with the rows
test_triu_neg                                    refuse k is a graph input of rank 0, not a constant
test_triu_one_row                                refuse k is a graph input of rank 0, not a constant
test_triu_out_neg_out                            refuse k is a graph input of rank 0, not a constant
test_triu_out_pos                                refuse k is a graph input of rank 0, not a constant
test_triu_pos                                    refuse k is a graph input of rank 0, not a constant
test_triu_square_neg                             refuse k is a graph input of rank 0, not a constant
test_triu_zero                                   refuse k is a graph input of rank 0, not a constant
test_unsqueeze_axis_0                            refuse starts/axes/split are graph inputs, not constants
test_unsqueeze_axis_1                            refuse starts/axes/split are graph inputs, not constants
test_unsqueeze_axis_2                            refuse starts/axes/split are graph inputs, not constants
test_unsqueeze_negative_axes                     refuse starts/axes/split are graph inputs, not constants
test_unsqueeze_three_axes                        refuse starts/axes/split are graph inputs, not constants
test_unsqueeze_two_axes                          refuse starts/axes/split are graph inputs, not constants
test_unsqueeze_unsorted_axes                     refuse starts/axes/split are graph inputs, not constants
test_where_example                               refuse bool inputs; dlrun inputs are float or integer
test_where_long_example                          refuse bool inputs; dlrun inputs are float or integer
LIST
}
unrepresentable >"$tmp/list"

t_node() {
	d=$ONNX_NODE_DIR/$1
	w=$tmp/w
	rm -rf "$w"
	mkdir -p "$w"
	run_dlrun import "$d/model.onnx" -o "$w/model.yaml"
	expect_rc 0 || return 0
	set --
	for f in "$d"/test_data_set_0/input_*.pb; do
		[ -e "$f" ] || continue
		n=$(basename "$f" .pb)
		"$ONNX2NPY" "$f" "$w/$n.npy" 2>"$w/err" || fail "$(cat "$w/err")"
		set -- "$@" -i "$w/$n.npy"
	done
	: >"$w/expected.npy"
	k=0
	while [ -e "$d/test_data_set_0/output_$k.pb" ]; do
		"$ONNX2NPY" "$d/test_data_set_0/output_$k.pb" "$w/o.npy" 2>"$w/err" ||
			fail "$(cat "$w/err")"
		cat "$w/o.npy" >>"$w/expected.npy"
		k=$((k + 1))
	done
	[ -s "$tmp/diag" ] && return 0
	run_dlrun infer "$w/model.yaml" "$@"
	expect_rc 0 || return 0
	cp "$tmp/stdout" "$w/out.npy"
	"$NPYCMP" "$w/out.npy" "$w/expected.npy" 1e-4 >"$w/cmp" 2>&1 || fail "$(cat "$w/cmp")"
	return 0
}

t_refused() {
	w=$tmp/r
	rm -rf "$w"
	mkdir -p "$w"
	run_dlrun import "$ONNX_NODE_DIR/$1/model.onnx" -o "$w/model.yaml"
	expect_rc 2
	expect_one_error_line
	only_files "$w"
	return 0
}

ran=0
"$ONNX2NPY" --ops "$ONNX_NODE_DIR"/test_*/model.onnx >"$tmp/ops" 2>/dev/null
while read -r path ops <&3; do
	name=$(basename "$(dirname "$path")")
	all=yes
	for op in $ops; do
		case $mapped in *" $op "*) ;; *) all=no; break ;; esac
	done
	[ "$all" = yes ] || continue
	ran=$((ran + 1))
	valgrind_every 8
	line=$(grep -e "^$name " "$tmp/list")
	if [ -z "$line" ]; then
		check "$name: import, infer, outputs within 1e-4" t_node "$name"
		continue
	fi
	set -- $line
	how=$2
	shift 2
	if [ "$how" = refuse ]; then
		check "$name: refused with one line ($*)" t_refused "$name"
	else
		skip "$name" "$*"
	fi
done 3<"$tmp/ops"
t_count() {
	[ "$ran" -ge 100 ] || fail "only $ran node tests have mapped op types"
	return 0
}
check "node tests of the mapped op types found ($ran)" t_count

done_testing
