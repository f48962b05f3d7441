# Unit tests of lib/io: datasets, IDX, CIFAR and NumPy import, synthetic data, the Loader
# and its augmentation, checkpoints.
lpsgd_unit_test(test_io_loader SOURCES test_io_loader.cpp DEPS lpsgd_io)
lpsgd_unit_test(test_io_data SOURCES test_io_data.cpp DEPS lpsgd_io)
lpsgd_unit_test(test_io_checkpoint SOURCES test_io_checkpoint.cpp DEPS lpsgd_io)
lpsgd_unit_test(test_io_import SOURCES test_io_import.cpp DEPS lpsgd_io)
lpsgd_unit_test(test_io_augment SOURCES test_io_augment.cpp DEPS lpsgd_io)
