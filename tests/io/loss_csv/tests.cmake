moepolicy_add_test(test_io_loss_table_csv SOURCES ${CMAKE_CURRENT_LIST_DIR}/loss_table_csv.cpp IO)
