from warehouse.cli.app import main

main()
