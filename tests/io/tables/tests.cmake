# Tests of the FLAME-MoE CSV importer and of the JSON table readers (moepolicy::io).
moepolicy_add_test(test_io_flame_csv SOURCES ${CMAKE_CURRENT_LIST_DIR}/../flame_csv.cpp IO)
moepolicy_add_test(test_io_tables_json SOURCES ${CMAKE_CURRENT_LIST_DIR}/../tables_json.cpp IO)
moepolicy_add_test(test_io_json_document SOURCES ${CMAKE_CURRENT_LIST_DIR}/../json_document.cpp IO)
