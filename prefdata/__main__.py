from prefdata.commands.cli import main

main()
