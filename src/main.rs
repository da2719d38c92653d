fn main() {
    println!("dcache");
}
