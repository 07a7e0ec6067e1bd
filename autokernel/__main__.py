from autokernel.cli.app import main

main()
