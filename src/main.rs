fn main() {
    std::process::exit(cheq::cli::main());
}
