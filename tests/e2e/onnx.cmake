# Models from and to ONNX (issue 34, tests/e2e/onnx_check.py): agreement with
# ONNX Runtime before and after training (graphs from onnx.helper and from
# PyTorch), export -> import -> export, the bitwise twin of a built-in model,
# refused graphs, a dataset without a test split; PyTorch ResNets (below).
# ONNX Runtime comes from PyPI into a venv in the build directory, made by the
# setup test (a CTest fixture); a case whose tools are missing reports SKIPPED
# with the reason.
set(LPSGD_ONNX_VENV ${CMAKE_BINARY_DIR}/onnx-venv)
add_test(NAME e2e.onnx.setup COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/onnx_venv.sh ${LPSGD_ONNX_VENV})
set_tests_properties(e2e.onnx.setup PROPERTIES LABELS e2e TIMEOUT 1000 FIXTURES_SETUP onnx_venv)
foreach(case agreement torch roundtrip twin errors notest)
  add_test(NAME e2e.onnx.${case}
    COMMAND bash -c "py=/usr/bin/python3; [[ -x $1/bin/python ]] && py=$1/bin/python; exec \"$py\" \"$2\" \"$3\" \"$4\" \"$1\""
            onnx ${LPSGD_ONNX_VENV} ${CMAKE_CURRENT_LIST_DIR}/onnx_check.py ${case} $<TARGET_FILE:lpsgd>)
  set_tests_properties(e2e.onnx.${case} PROPERTIES LABELS "e2e;mpi" TIMEOUT 900 PROCESSORS 2
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED onnx_venv ENVIRONMENT "${LPSGD_E2E_ENV}")
endforeach()
# PyTorch ResNets (tools/onnx/torch_resnet.py: ResNet-20, torchvision's
# ResNet-18) in PyTorch's three export forms: lpsgd eval agrees with PyTorch,
# lpsgd train trains them, lpsgd export keeps the batch norms' statistics
# (tests/e2e/onnx_resnet.py). ONNX Runtime, where the venv has it, checks the
# export; without torch or torchvision the test reports SKIPPED.
add_test(NAME e2e.onnx.resnet
  COMMAND bash -c "py=/usr/bin/python3; [[ -x $1/bin/python ]] && py=$1/bin/python; exec \"$py\" \"$2\" \"$3\" \"$1\" \"$4\""
          onnx ${LPSGD_ONNX_VENV} ${CMAKE_CURRENT_LIST_DIR}/onnx_resnet.py $<TARGET_FILE:lpsgd>
          ${PROJECT_SOURCE_DIR}/tools/onnx/torch_resnet.py)
set_tests_properties(e2e.onnx.resnet PROPERTIES LABELS "e2e;mpi" TIMEOUT 900 PROCESSORS 2
  SKIP_RETURN_CODE 77 FIXTURES_REQUIRED onnx_venv ENVIRONMENT "${LPSGD_E2E_ENV}")
