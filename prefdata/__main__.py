from prefdata.cli import main

main()
