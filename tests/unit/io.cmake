# Unit tests of lib/io: datasets, IDX import, synthetic data, the Loader, checkpoints.
lpsgd_unit_test(test_io_loader SOURCES test_io_loader.cpp DEPS lpsgd_io)
lpsgd_unit_test(test_io_data SOURCES test_io_data.cpp DEPS lpsgd_io)
lpsgd_unit_test(test_io_checkpoint SOURCES test_io_checkpoint.cpp DEPS lpsgd_io)
