# The PyTorch parity again with the AMX-BF16 x3 training products (skipped without AMX-BF16): with the
# attention as per-head AMX products (auto), and with the direct F32 attention kernels.
add_test(NAME train_parity_amx COMMAND test_train_parity amx-bf16x3 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(train_parity_amx PROPERTIES TIMEOUT ${VS_TEST_TIMEOUT} SKIP_RETURN_CODE 77)
add_test(NAME train_parity_amx_direct COMMAND test_train_parity amx-bf16x3 direct
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(train_parity_amx_direct PROPERTIES TIMEOUT ${VS_TEST_TIMEOUT} SKIP_RETURN_CODE 77)
